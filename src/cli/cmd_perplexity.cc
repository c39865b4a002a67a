// `omnibus perplexity -m MODEL -f TEXT [--ctx-size N]`: perplexity of a text,
// computed the way llama.cpp's llama-perplexity does so the two compare:
// the tokens are cut into chunks of ctx-size; each chunk is evaluated from an
// empty cache (its first token replaced by BOS when the model adds one) and
// only the second half of each chunk is scored, so every scored token has at
// least ctx-size/2 tokens of context.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "model/sequence_runner.h"
#include "util/progress.h"

namespace omnibus {
namespace {

struct PerplexityOptions {
  std::string model = "smollm2-135m";
  std::string file;
  int ctx_size = 512;
  int threads = 0;
  int batch = 512;
  int max_chunks = -1;
  std::string kv_dtype = "f16";
  int kv_residual_blocks = -1;  // --kv-residual-blocks
};

// -log p(target) from one row of logits, in double precision.
double nll_of(std::span<const float> logits, int32_t target) {
  float max = logits[0];
  for (float v : logits) max = std::max(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - double(max));
  return -(double(logits[size_t(target)]) - double(max) - std::log(sum));
}

int run_perplexity(const PerplexityOptions& o) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "omnibus perplexity: %s\n", s.to_string().c_str());
    return 1;
  };
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return fail(Status::not_found("cannot read '{}'", o.file));
  std::stringstream ss;
  ss << in.rdbuf();
  StatusOr<KvFormat> kv_dtype = parse_kv_format(o.kv_dtype);
  if (!kv_dtype.is_ok()) return fail(kv_dtype.status());
  StatusOr<LoadedModel> m = load_model_for_cli(o.model, o.threads);
  if (!m.is_ok()) return fail(m.status());

  std::vector<int32_t> tokens = m->tokenizer->encode(ss.str(), /*add_special=*/true,
                                                     /*parse_special=*/false);
  const int n_ctx = o.ctx_size;
  if (int64_t(tokens.size()) < 2 * int64_t(n_ctx)) {
    return fail(Status::invalid_argument(
        "'{}' has {} tokens; perplexity at context {} needs at least {}", o.file, tokens.size(),
        n_ctx, 2 * n_ctx));
  }
  int n_chunks = int(tokens.size() / size_t(n_ctx));
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  fmt::print(stderr, "perplexity: {} tokens, {} chunks of {}, kv cache {}\n", tokens.size(),
             n_chunks, n_ctx, o.kv_dtype);

  StatusOr<std::unique_ptr<SequenceRunner>> runner =
      SequenceRunner::create(*m->model, n_ctx, *kv_dtype, 16, o.kv_residual_blocks);
  if (!runner.is_ok()) return fail(runner.status());
  const int32_t bos = m->tokenizer->bos_id();
  // The model adds BOS iff encoding the empty string with special tokens yields it.
  const bool add_bos = bos >= 0 && m->tokenizer->encode("", true, false) == std::vector<int32_t>{bos};
  const size_t n_vocab = size_t(m->model->config().n_vocab);
  const int first = n_ctx / 2;
  double nll = 0;
  int64_t count = 0;
  ProgressBar bar("evaluating", uint64_t(n_chunks), "chunks");
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  for (int c = 0; c < n_chunks; ++c) {
    std::copy(tokens.begin() + int64_t(c) * n_ctx, tokens.begin() + int64_t(c + 1) * n_ctx,
              chunk.begin());
    if (add_bos && bos >= 0) chunk[0] = bos;
    (*runner)->reset();
    // The unscored first half needs no logits (the output head is most of a
    // small model's prompt cost); splitting the chunk there changes no bit of
    // the second half's (batch invariance).
    const std::span<const int32_t> whole(chunk);
    if (first > 0) {
      StatusOr<std::span<const float>> head = (*runner)->eval(whole.first(size_t(first)), false, o.batch);
      if (!head.is_ok()) return fail(head.status());
    }
    StatusOr<std::span<const float>> logits = (*runner)->eval(whole.subspan(size_t(first)), true, o.batch);
    if (!logits.is_ok()) return fail(logits.status());
    // Targets are the original tokens (the BOS substitution only affects input).
    const int32_t* target = tokens.data() + int64_t(c) * n_ctx;
    for (int j = first; j < n_ctx - 1; ++j) {
      nll += nll_of(logits->subspan(size_t(j - first) * n_vocab, n_vocab), target[j + 1]);
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
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a text file (same method as llama.cpp's llama-perplexity)");
  cmd->add_option("-m,--model", o->model, "GGUF path or bundled model name")->capture_default_str();
  cmd->add_option("-f,--file", o->file, "Text file to evaluate")->required();
  cmd->add_option("-c,--ctx-size", o->ctx_size, "Tokens per chunk")->capture_default_str()
      ->check(CLI::Range(8, 1 << 20));
  cmd->add_option("-b,--batch-size", o->batch, "Tokens per forward pass")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--chunks", o->max_chunks, "Evaluate at most this many chunks (-1 = all)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", o->kv_dtype, "KV cache element type: f16, f32, q8, q4, kivi2")
      ->capture_default_str();
  cmd->add_option("--kv-residual-blocks", o->kv_residual_blocks,
                  "q4/kivi2: completed KV blocks a query still reads in fp16 besides its open one "
                  "(KIVI's residual window; -1 = the format's default: kivi2 1, q4 0)")
      ->capture_default_str()->check(CLI::Range(-1, 64));
  cmd->callback([o, &exit_code] { exit_code = run_perplexity(*o); });
}

}  // namespace omnibus
