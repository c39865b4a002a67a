// Encode / decode speed on the bundled SmolLM2 vocabulary (skipped when the
// model is missing). Reports tokens per second; the target is < 10 ms per
// 1k tokens, i.e. > 100k tokens/s on one core.
#include <benchmark/benchmark.h>

#include <fstream>
#include <memory>
#include <string>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace omnibus {
namespace {

const Tokenizer* smollm2() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    const char* dir = std::getenv("OMNIBUS_SOURCE_DIR");
    const std::string path = std::string(dir ? dir : ".") + "/models/smollm2-135m.gguf";
    auto file = GgufFile::open(path);
    if (!file.is_ok()) return nullptr;
    auto t = Tokenizer::from_gguf(**file);
    return t.is_ok() ? std::move(t).value() : nullptr;
  }();
  return tok.get();
}

std::string prompt_text(int repeats) {
  const std::string chunk =
      "<|im_start|>user\nLarge language models are trained on vast corpora of text. "
      "During inference, a tokenizer converts the user's prompt into integer ids; in 2023 "
      "PagedAttention cut KV-cache waste to under 4%.\n    def f(x):\n        return x * 42\n"
      "Unicode: café, naïve, 日本語のテキスト, Привет мир, 😀👋🌍<|im_end|>\n";
  std::string s;
  for (int i = 0; i < repeats; ++i) s += chunk;
  return s;
}

void BM_Encode(benchmark::State& state) {
  const Tokenizer* tok = smollm2();
  if (!tok) {
    state.SkipWithError("models/smollm2-135m.gguf not found (set OMNIBUS_SOURCE_DIR)");
    return;
  }
  const std::string text = prompt_text(static_cast<int>(state.range(0)));
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text, true, true);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids);
  }
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Encode)->Arg(1)->Arg(100)->Unit(benchmark::kMicrosecond);

void BM_Decode(benchmark::State& state) {
  const Tokenizer* tok = smollm2();
  if (!tok) {
    state.SkipWithError("models/smollm2-135m.gguf not found (set OMNIBUS_SOURCE_DIR)");
    return;
  }
  const auto ids = tok->encode(prompt_text(100), false, true);
  for (auto _ : state) {
    StreamDecoder dec(*tok);
    size_t n = 0;
    for (int32_t id : ids) n += dec.push(id).size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(ids.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace omnibus
