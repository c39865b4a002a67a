// `omnibus perplexity -m MODEL -f TEXT [--ctx-size N]`: perplexity of a text,
// computed the way llama.cpp's llama-perplexity does so the two compare:
// the tokens are cut into chunks of ctx-size; each chunk is evaluated from an
// empty cache (its first token replaced by BOS when the model adds one) and
// only the second half of each chunk is scored, so every scored token has at
// least ctx-size/2 tokens of context.
//
// It runs on the Engine: one request per chunk, whose prompt logprobs
// (Request::prompt_logprobs, the engine's log-softmax of each prompt token)
// give the scores. Outputs are batch-invariant, so chunks in flight together
// and -b (the engine's token budget per step) change no bit of the result.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/engine_request.h"
#include "cli/loaded_model.h"
#include "engine/engine.h"
#include "util/progress.h"

namespace omnibus {
namespace {

struct PerplexityOptions {
  ModelFlags model;
  EngineFlags engine;  // the KV format flags only
  std::string file;
  int ctx_size = 512;
  int batch = 512;
  int max_chunks = -1;
};

// Chunks in flight at once: the next one is queued while one is scored, so
// the engine never waits for this thread.
constexpr int kChunksInFlight = 2;

int run_perplexity(const PerplexityOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "omnibus perplexity: %s\n", s.to_string().c_str());
    return 1;
  };
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return fail(Status::not_found("cannot read '{}'", o.file));
  std::stringstream ss;
  ss << in.rdbuf();
  StatusOr<EngineConfig> cfg = to_engine_config(o.engine);
  if (!cfg.is_ok()) return fail(cfg.status());
  StatusOr<LoadedModel> m = load_model_for_cli(o.model);
  if (!m.is_ok()) return fail(m.status());

  std::vector<int32_t> tokens = m->tokenizer->encode(ss.str(), /*add_special=*/true,
                                                     /*parse_special=*/false);
  const int n_ctx = o.ctx_size;
  if (int64_t(tokens.size()) < 2 * int64_t(n_ctx)) {
    return fail(
        Status::invalid_argument("'{}' has {} tokens; perplexity at context {} needs at least {}",
                                 o.file, tokens.size(), n_ctx, 2 * n_ctx));
  }
  const int32_t n_ctx_train = m->model->config().n_ctx_train;
  if (n_ctx_train > 0 && n_ctx > n_ctx_train) {
    fmt::print(stderr,
               "perplexity: warning: --ctx-size {} exceeds the model's training context {}\n",
               n_ctx, n_ctx_train);
  }
  int n_chunks = int(tokens.size() / size_t(n_ctx));
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, kv cache {}\n", tokens.size(),
             n_chunks, n_ctx, o.engine.kv_dtype);

  // A request generates one token after its prompt (the chunk): n_ctx + 1,
  // which may pass the training context (the extra token is never scored).
  cfg->max_model_len = n_ctx + 1;
  cfg->allow_long_max_model_len = true;
  cfg->max_num_batched_tokens = o.batch;
  cfg->max_num_seqs = kChunksInFlight;
  cfg->eog_ids = m->tokenizer->eog_ids();
  cfg->log_startup = false;
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(*m->model, *cfg);
  if (!engine.is_ok()) return fail(engine.status());
  const int32_t bos = m->tokenizer->bos_id();
  // The model adds BOS iff encoding the empty string with special tokens yields it.
  const bool add_bos =
      bos >= 0 && m->tokenizer->encode("", true, false) == std::vector<int32_t>{bos};
  // One request per chunk: its prompt logprobs score every token from the
  // second on; the second half is counted. Each chunk starts from an empty
  // cache (prompt logprobs bypass the prefix cache).
  auto submit = [&](int c) {
    Request r;
    r.prompt.assign(tokens.begin() + int64_t(c) * n_ctx, tokens.begin() + int64_t(c + 1) * n_ctx);
    if (add_bos) r.prompt[0] = bos;
    r.prompt_logprobs = 0;
    r.max_tokens = 1;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    return EngineRequest::submit(**engine, *m->tokenizer, std::move(r));
  };
  const int first = n_ctx / 2;
  double nll = 0;
  int64_t count = 0;
  ProgressBar bar("evaluating", uint64_t(n_chunks), "chunks");
  std::deque<EngineRequest> in_flight;
  int next = 0;
  for (int c = 0; c < n_chunks; ++c) {
    for (; next < n_chunks && next < c + kChunksInFlight; ++next) {
      StatusOr<EngineRequest> r = submit(next);
      if (!r.is_ok()) return fail(r.status());
      in_flight.push_back(std::move(r).value());
    }
    StatusOr<EngineRequestResult> r = in_flight.front().wait();
    in_flight.pop_front();
    if (!r.is_ok()) return fail(r.status());
    // Entry i scores prompt token i + 1 from the tokens before it; the BOS
    // substitution only changed the input of token 0, which is never a target.
    const std::vector<PromptLogprob>& lp = r->prompt_logprobs;
    if (int64_t(lp.size()) != n_ctx - 1) {
      return fail(Status::internal("{} prompt logprobs for a chunk of {}", lp.size(), n_ctx));
    }
    for (int j = first; j < n_ctx - 1; ++j) {
      nll -= double(lp[size_t(j)].logprob);
      ++count;
    }
    bar.update(uint64_t(c + 1));
    fmt::print(stderr, "[{}] {:.4f}{}", c + 1, std::exp(nll / double(count)),
               c + 1 == n_chunks ? "\n" : " ");
  }
  fmt::print("perplexity: {:.4f}\n", std::exp(nll / double(count)));
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, int& exit_code) {
  auto [cmd, o] = add_model_command<PerplexityOptions>(
      app, exit_code, "perplexity",
      "Perplexity of a text file (same method as llama.cpp's llama-perplexity)", run_perplexity);
  cmd->add_option("-f,--file", o->file, "Text file to evaluate")->required();
  cmd->add_option("-c,--ctx-size", o->ctx_size, "Tokens per chunk")
      ->capture_default_str()
      ->check(CLI::Range(8, 1 << 20));
  cmd->add_option("-b,--batch-size", o->batch, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chunks", o->max_chunks, "Evaluate at most this many chunks (-1 = all)")
      ->capture_default_str();
  add_kv_format_flags(*cmd, o->engine);
}

}  // namespace omnibus
