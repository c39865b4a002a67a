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
//
// KL divergence, as llama.cpp measures fidelity (eval/kl_divergence.h):
// --kl-divergence-base FILE reads the logits file llama-perplexity
// --kl-divergence-base wrote (eval/logits_file.h), evaluates the tokens and
// chunks it holds (checked against -f's tokenization when -f is given) and
// prints llama-perplexity --kl-divergence's statistics; --kl-divergence-base-out
// FILE writes omnibus's own logits in that format, for llama.cpp or omnibus
// to compare against. Each chunk's scored rows reach a PromptLogitsSink on
// the engine thread, which reduces them at once (one KldRow, or one encoded
// row, per position), so no chunk's full logits are held.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/engine_request.h"
#include "cli/loaded_model.h"
#include "engine/engine.h"
#include "eval/kl_divergence.h"
#include "eval/logits_file.h"
#include "util/progress.h"

namespace omnibus {
namespace {

struct PerplexityOptions {
  ModelFlags model;
  EngineFlags engine;  // the KV format flags only
  std::string file;
  int ctx_size = 0;  // 0: 512, or the base logits file's
  int batch = 512;
  int max_chunks = -1;
  std::string kld_base;      // llama-perplexity --kl-divergence-base file to compare against
  std::string kld_base_out;  // where to write omnibus's logits in that format
};

// One chunk's scored positions [first, first + n_rows), reduced on the engine
// thread as they arrive: against the base's rows (KldRow each) and/or encoded
// for the output file.
class ChunkSink final : public PromptLogitsSink {
 public:
  ChunkSink(int32_t first, int32_t n_rows, int32_t n_vocab, std::vector<int32_t> tokens,
            std::vector<uint16_t> base_rows, bool encode)
      : first_(first),
        n_rows_(n_rows),
        words_(eval::row_words(n_vocab)),
        tokens_(std::move(tokens)),
        base_(std::move(base_rows)) {
    if (!base_.empty()) rows.resize(size_t(n_rows));
    if (encode) encoded.resize(size_t(n_rows * words_));
  }

  void consume(int32_t p, std::span<const float> logits) override {
    if (p < first_ || p >= first_ + n_rows_) return;
    const int64_t r = p - first_;
    if (!base_.empty()) {
      rows[size_t(r)] =
          eval::kld_row(logits, std::span(base_).subspan(size_t(r * words_), size_t(words_)),
                        tokens_[size_t(p) + 1]);
    }
    if (!encoded.empty()) {
      eval::encode_row(logits, std::span(encoded).subspan(size_t(r * words_), size_t(words_)));
    }
  }

  std::vector<eval::KldRow> rows;  // [n_rows] when comparing
  std::vector<uint16_t> encoded;   // [n_rows * row_words] when writing

 private:
  const int32_t first_, n_rows_;
  const int64_t words_;
  const std::vector<int32_t> tokens_;  // the chunk (targets: position + 1)
  const std::vector<uint16_t> base_;
};

// Chunks in flight at once: the next one is queued while one is scored, so
// the engine never waits for this thread.
constexpr int kChunksInFlight = 2;

int run_perplexity(const PerplexityOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "omnibus perplexity: %s\n", s.to_string().c_str());
    return 1;
  };
  if (o.file.empty() && o.kld_base.empty()) {
    return fail(
        Status::invalid_argument("give a text (-f) or a base logits file "
                                 "(--kl-divergence-base)"));
  }
  if (!o.kld_base_out.empty() && o.file.empty() && o.kld_base.empty()) {
    return fail(Status::invalid_argument("--kl-divergence-base-out needs -f"));
  }
  std::optional<eval::LogitsFileReader> base;
  if (!o.kld_base.empty()) {
    StatusOr<eval::LogitsFileReader> r = eval::LogitsFileReader::open(o.kld_base);
    if (!r.is_ok()) return fail(r.status());
    base.emplace(std::move(r).value());
    if (o.ctx_size != 0 && o.ctx_size != base->header().n_ctx) {
      return fail(Status::invalid_argument("--ctx-size {} differs from the base file's context {}",
                                           o.ctx_size, base->header().n_ctx));
    }
  }
  StatusOr<EngineConfig> cfg = to_engine_config(o.engine);
  if (!cfg.is_ok()) return fail(cfg.status());
  StatusOr<LoadedModel> m = load_model_for_cli(o.model);
  if (!m.is_ok()) return fail(m.status());
  const int32_t n_vocab = m->model->config().n_vocab;

  const int n_ctx = base ? base->header().n_ctx : (o.ctx_size != 0 ? o.ctx_size : 512);
  std::vector<int32_t> tokens;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) return fail(Status::not_found("cannot read '{}'", o.file));
    std::stringstream ss;
    ss << in.rdbuf();
    tokens = m->tokenizer->encode(ss.str(), /*add_special=*/true, /*parse_special=*/false);
    if (int64_t(tokens.size()) < 2 * int64_t(n_ctx)) {
      return fail(
          Status::invalid_argument("'{}' has {} tokens; perplexity at context {} needs at least {}",
                                   o.file, tokens.size(), n_ctx, 2 * n_ctx));
    }
  }
  if (base) {
    // The base file holds the evaluated tokens; -f, when given, must give the
    // same tokens and chunks (the same tokenizer on the same text).
    const eval::LogitsFileHeader& h = base->header();
    if (h.n_vocab != n_vocab) {
      return fail(Status::invalid_argument("the base file's vocabulary has {} tokens, the model {}",
                                           h.n_vocab, n_vocab));
    }
    const std::vector<int32_t>& bt = base->tokens();
    if (!tokens.empty()) {
      // llama-perplexity --chunks N keeps the first N chunks.
      const int64_t n_chunks_text = int64_t(tokens.size()) / n_ctx;
      if (n_chunks_text < h.n_chunk) {
        return fail(
            Status::invalid_argument("'{}' makes {} chunks of {}, fewer than the base file's {}",
                                     o.file, n_chunks_text, n_ctx, h.n_chunk));
      }
      const auto diff = std::mismatch(bt.begin(), bt.end(), tokens.begin());
      if (diff.first != bt.end()) {
        const int64_t i = diff.first - bt.begin();
        return fail(Status::invalid_argument(
            "tokenization differs from the base file at token {} (omnibus {}, base {})", i,
            tokens[size_t(i)], bt[size_t(i)]));
      }
      fmt::print(stderr, "perplexity: tokenization and chunking agree with '{}'\n", o.kld_base);
    }
    tokens = bt;
  }
  const int32_t n_ctx_train = m->model->config().n_ctx_train;
  if (n_ctx_train > 0 && n_ctx > n_ctx_train) {
    fmt::print(stderr,
               "perplexity: warning: --ctx-size {} exceeds the model's training context {}\n",
               n_ctx, n_ctx_train);
  }
  int n_chunks = int(tokens.size() / size_t(n_ctx));
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  std::optional<eval::LogitsFileWriter> out;
  if (!o.kld_base_out.empty()) {
    const eval::LogitsFileHeader h{n_ctx, n_vocab, n_chunks};
    StatusOr<eval::LogitsFileWriter> w = eval::LogitsFileWriter::create(
        o.kld_base_out, h, std::span(tokens).first(size_t(n_chunks) * size_t(n_ctx)));
    if (!w.is_ok()) return fail(w.status());
    out.emplace(std::move(w).value());
  }
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
  const int first = n_ctx / 2;
  std::deque<std::shared_ptr<ChunkSink>> sinks;  // of the chunks in flight, in order
  auto submit = [&](int c) -> StatusOr<EngineRequest> {
    Request r;
    r.prompt.assign(tokens.begin() + int64_t(c) * n_ctx, tokens.begin() + int64_t(c + 1) * n_ctx);
    if (base || out) {
      std::vector<uint16_t> base_rows;
      if (base) OMNIBUS_RETURN_IF_ERROR(base->read_chunk(c, &base_rows));
      auto sink = std::make_shared<ChunkSink>(first, eval::rows_per_chunk(n_ctx), n_vocab, r.prompt,
                                              std::move(base_rows), out.has_value());
      r.prompt_logits_sink = sink;
      sinks.push_back(std::move(sink));
    }
    if (add_bos) r.prompt[0] = bos;
    r.prompt_logprobs = 0;
    r.max_tokens = 1;
    r.ignore_eos = true;
    r.sampling.temperature = 0.0f;
    return EngineRequest::submit(**engine, *m->tokenizer, std::move(r));
  };
  double nll = 0;
  eval::KlDivergence kld;
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
    if (!sinks.empty()) {
      const std::shared_ptr<ChunkSink> sink = std::move(sinks.front());
      sinks.pop_front();
      for (const eval::KldRow& row : sink->rows) kld.add(row);
      if (out) {
        if (Status s = out->write_chunk(sink->encoded); !s.is_ok()) return fail(s);
      }
    }
    bar.update(uint64_t(c + 1));
    fmt::print(stderr, "[{}] {:.4f}{}", c + 1, std::exp(nll / double(count)),
               c + 1 == n_chunks ? "\n" : " ");
  }
  fmt::print("perplexity: {:.4f}\n", std::exp(nll / double(count)));
  // The exact sum, for A/B runs that must agree to the bit (e.g.
  // --no-sliding-window-kv): hex float, summed in token order.
  fmt::print(stderr, "perplexity: mean NLL {:.17g} (exactly {:a}) over {} tokens\n",
             nll / double(count), nll / double(count), count);
  if (out) {
    if (Status s = out->close(); !s.is_ok()) return fail(s);
    fmt::print(stderr, "perplexity: wrote {} chunks of logits to '{}'\n", n_chunks, o.kld_base_out);
  }
  if (base) {
    fmt::print("\n{}", eval::KlDivergence::format(kld.summary()));
  }
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, int& exit_code) {
  auto [cmd, o] = add_model_command<PerplexityOptions>(
      app, exit_code, "perplexity",
      "Perplexity of a text file (same method as llama.cpp's llama-perplexity)", run_perplexity);
  cmd->add_option("-f,--file", o->file,
                  "Text file to evaluate (with --kl-divergence-base: checked against the base "
                  "file's tokens)");
  cmd->add_option("-c,--ctx-size", o->ctx_size,
                  "Tokens per chunk (default 512, or the base file's)")
      ->check(CLI::Range(8, 1 << 20));
  cmd->add_option("--kl-divergence-base", o->kld_base,
                  "Compare against this logits file (llama-perplexity --kl-divergence-base "
                  "FILE wrote it): prints KL divergence statistics as llama-perplexity "
                  "--kl-divergence does");
  cmd->add_option("--kl-divergence-base-out", o->kld_base_out,
                  "Write omnibus's logits to this file in llama-perplexity's format (a base "
                  "for llama-perplexity --kl-divergence or omnibus --kl-divergence-base)");
  cmd->add_option("-b,--batch-size", o->batch, "Tokens per forward pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chunks", o->max_chunks, "Evaluate at most this many chunks (-1 = all)")
      ->capture_default_str();
  add_kv_format_flags(*cmd, o->engine);
}

}  // namespace omnibus
