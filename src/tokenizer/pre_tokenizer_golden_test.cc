// SmolLM2's vocabulary under the Llama 3 and Qwen 2 pre-tokenizers against
// llama.cpp's ids (tests/golden/tokenizer/smollm2-vocab-{llama-bpe,qwen2}.json,
// made by tools/golden/gen_tokenizer_golden.py from the vocab-only GGUFs that
// tools/golden/make_vocab_gguf.py writes to models/random/; scripts/
// fetch_models.sh makes them). The golden files record the GGUFs' sha256 and
// the fixture refuses another file. Skipped when the GGUF is missing.
#include <gtest/gtest.h>

#include "tokenizer/golden_tokenizer_testing.h"
#include "tokenizer/unicode.h"

namespace omnibus {
namespace {

using golden_tokenizer::GoldenTokenizerTest;

struct LlamaBpeVocab : GoldenTokenizerTest<LlamaBpeVocab> {
  static std::string model_path() {
    return testdata::model_path("random/smollm2-vocab-llama-bpe.gguf");
  }
  static std::string golden_path() {
    return golden_tokenizer::golden_path("smollm2-vocab-llama-bpe");
  }
};
struct Qwen2Vocab : GoldenTokenizerTest<Qwen2Vocab> {
  static std::string model_path() {
    return testdata::model_path("random/smollm2-vocab-qwen2.gguf");
  }
  static std::string golden_path() { return golden_tokenizer::golden_path("smollm2-vocab-qwen2"); }
};

template <typename Suite>
class PreTokenizerGolden : public Suite {};
using Suites = ::testing::Types<LlamaBpeVocab, Qwen2Vocab>;
TYPED_TEST_SUITE(PreTokenizerGolden, Suites);

TYPED_TEST(PreTokenizerGolden, VocabularyFacts) {
  golden_tokenizer::expect_vocabulary_facts(this->tok(), this->golden());
}

TYPED_TEST(PreTokenizerGolden, MatchesLlamaCppOnEveryGoldenString) {
  golden_tokenizer::expect_ids_match(this->tok(), this->golden()["cases"], 300);
}

TYPED_TEST(PreTokenizerGolden, DecodeInvertsEncode) {
  for (const auto& c : this->golden()["cases"]) {
    const std::string text = golden_tokenizer::case_text(c);
    if (!unicode::is_valid_utf8(text)) continue;  // invalid bytes come back as U+FFFD
    EXPECT_EQ(this->tok().decode(this->tok().encode(text, false, false)), text) << c.dump();
  }
}

}  // namespace
}  // namespace omnibus
