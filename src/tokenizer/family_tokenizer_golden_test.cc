// The tokenizer of each random-weight family model (models/random/<family>.gguf,
// tools/golden/make_random_models.py: SmolLM2's vocabulary with the family's
// pre-tokenizer, special tokens, BOS rule and name) against llama.cpp's ids on
// the same file (tests/golden/tokenizer/random-<family>.json, made by
// tools/golden/gen_tokenizer_golden.py --extra-strings families: the shared
// strings plus Llama 3 headers, Mistral [INST], Phi-3 turns, Qwen's tool and
// thinking tags). Skipped when the models are not generated.
#include <string>

#include "tokenizer/golden_tokenizer_testing.h"
#include "util/testdata.h"

namespace omnibus {
namespace {

using golden_tokenizer::GoldenTokenizerTest;

template <const char* kFamily>
struct Family : GoldenTokenizerTest<Family<kFamily>> {
  static std::string model_path() {
    return testdata::model_path(std::string("random/") + kFamily + ".gguf");
  }
  static std::string golden_path() {
    return golden_tokenizer::golden_path(std::string("random-") + kFamily);
  }
};

constexpr char kLlama3[] = "llama3";    // llama-bpe: ignore_merges, BOS added
constexpr char kMistral[] = "mistral";  // smollm pre-tokenizer, <s> added
constexpr char kQwen3[] = "qwen3";      // qwen2 pre-tokenizer
constexpr char kPhi3[] = "phi3";        // llama.cpp's Phi-3 special-token attributes

template <typename Suite>
class FamilyTokenizerGolden : public Suite {};
using Suites = ::testing::Types<Family<kLlama3>, Family<kMistral>, Family<kQwen3>, Family<kPhi3>>;
TYPED_TEST_SUITE(FamilyTokenizerGolden, Suites);

TYPED_TEST(FamilyTokenizerGolden, VocabularyFacts) {
  golden_tokenizer::expect_vocabulary_facts(this->tok(), this->golden());
}

TYPED_TEST(FamilyTokenizerGolden, MatchesLlamaCppOnEveryGoldenString) {
  golden_tokenizer::expect_ids_match(this->tok(), this->golden()["cases"], 240);
}

}  // namespace
}  // namespace omnibus
