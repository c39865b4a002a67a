// TokenMasker::allowed() cold (no cache: every call walks the trie) on a
// synthetic BPE-like vocabulary of 49,152 and 262,144 tokens, for llama.cpp's
// JSON grammar in three states: inside a string (most tokens alive), after
// `{` (only whitespace and `"`), and inside a number. Args: {n_vocab, state}.
//   cmake --build build --target grammar_microbench && ./build/grammar_microbench
#include <benchmark/benchmark.h>

#include <random>

#include "grammar/test_grammars.h"
#include "grammar/token_mask.h"

namespace omnibus::grammar {
namespace {

// Pieces like a byte-level BPE vocabulary: all 256 single bytes, then words
// with and without a leading space, digits, punctuation runs and some
// multi-byte UTF-8, 1 to 12 bytes long.
std::shared_ptr<const VocabTrie> synthetic_vocab(int n) {
  std::mt19937 rng(42);
  VocabBytes v;
  for (int c = 0; c < 256 && static_cast<int>(v.pieces.size()) < n; ++c) {
    v.pieces.push_back(std::string(1, static_cast<char>(c)));
  }
  const char* lower = "etaoinshrdlcumwfgypbvkjxqz";
  const char* punct = "{}[]\":,.-_()'!?;/\\\n\t ";
  const char* utf8[] = {"\xc3\xa9", "\xc3\xb6", "\xe2\x82\xac", "\xe4\xb8\xad", "\xf0\x9f\x98\x80"};
  while (static_cast<int>(v.pieces.size()) < n - 1) {
    std::string s;
    const int kind = static_cast<int>(rng() % 10);
    const int len = 1 + static_cast<int>(rng() % 11);
    if (kind < 5 && rng() % 2) s += ' ';
    for (int k = 0; k < len; ++k) {
      if (kind < 6) {
        s += lower[std::min<unsigned>(rng() % 26, rng() % 26)];  // skewed to common letters
      } else if (kind == 6) {
        s += static_cast<char>('0' + rng() % 10);
      } else if (kind == 7) {
        s += punct[rng() % 22];
      } else {
        s += utf8[rng() % 5];
      }
    }
    v.pieces.push_back(s);
  }
  v.pieces.push_back("<eos>");
  v.maskable.assign(v.pieces.size(), true);
  v.maskable.back() = false;
  v.eog_ids.push_back(n - 1);
  return std::make_shared<VocabTrie>(std::move(v));
}

void BM_AllowedCold(benchmark::State& state) {
  static auto grammar = *parse_ebnf(testing::kJsonGbnf);
  const auto trie = synthetic_vocab(static_cast<int>(state.range(0)));
  TokenMasker masker(grammar, trie, /*cache_entries=*/0);
  const char* prefixes[] = {"{\"key\": \"some te", "{", "{\"n\": 12"};
  GrammarMatcher m = masker.start();
  if (!m.accept_bytes(prefixes[state.range(1)])) state.SkipWithError("prefix rejected");
  size_t allowed = 0;
  for (auto _ : state) {
    auto mask = masker.allowed(m);
    benchmark::DoNotOptimize(mask);
    allowed = 0;
    for (uint64_t w : *mask) allowed += static_cast<size_t>(__builtin_popcountll(w));
  }
  state.counters["allowed"] = static_cast<double>(allowed);
}
BENCHMARK(BM_AllowedCold)->ArgsProduct({{49152, 262144}, {0, 1, 2}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace omnibus::grammar
