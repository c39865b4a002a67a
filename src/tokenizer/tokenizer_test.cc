// The SmolLM2 tokenizer read from the bundled GGUF against llama.cpp's answers
// (tests/golden/tokenizer/smollm2-135m.json, made by
// tools/golden/gen_tokenizer_golden.py). Skipped when the model is missing.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/golden_tokenizer_testing.h"
#include "tokenizer/unicode.h"

namespace omnibus {
namespace {

using golden_tokenizer::case_text;

// OMNIBUS_TOKENIZER_MODEL / OMNIBUS_TOKENIZER_GOLDEN: check another model
// against its own golden file (one-off runs; see docs/tokenizer.md).
bool model_env_set() { return std::getenv("OMNIBUS_TOKENIZER_MODEL") != nullptr; }

class SmolLm2Tokenizer : public golden_tokenizer::GoldenTokenizerTest<SmolLm2Tokenizer> {
 public:
  static std::string model_path() {
    const char* env = std::getenv("OMNIBUS_TOKENIZER_MODEL");
    return env ? env : testdata::model_path("smollm2-135m.gguf");
  }
  static std::string golden_path() {
    const char* env = std::getenv("OMNIBUS_TOKENIZER_GOLDEN");
    return env ? env : golden_tokenizer::golden_path("smollm2-135m");
  }
};

TEST_F(SmolLm2Tokenizer, VocabularyFacts) {
  golden_tokenizer::expect_vocabulary_facts(tok(), golden());
  if (!model_env_set()) {  // SmolLM2: <|im_end|> ends a turn
    const auto im_end = tok().token_id("<|im_end|>");
    ASSERT_TRUE(im_end.has_value());
    EXPECT_TRUE(tok().is_eog(*im_end));
    EXPECT_FALSE(tok().is_eog(*tok().token_id("<|im_start|>")));
  }
}

TEST_F(SmolLm2Tokenizer, MatchesLlamaCppOnEveryGoldenString) {
  golden_tokenizer::expect_ids_match(tok(), golden()["cases"], 150);
}

TEST_F(SmolLm2Tokenizer, DecodeInvertsEncode) {
  for (const auto& c : golden()["cases"]) {
    const std::string text = case_text(c);
    if (!unicode::is_valid_utf8(text)) continue;  // invalid bytes come back as U+FFFD
    EXPECT_EQ(tok().decode(tok().encode(text, false, false)), text) << c.dump();
    EXPECT_EQ(tok().decode(tok().encode(text, false, true), /*render_special=*/true), text)
        << c.dump();
  }
}

TEST_F(SmolLm2Tokenizer, SpecialTokenPieces) {
  if (model_env_set()) GTEST_SKIP() << "SmolLM2 only";
  const int32_t im_start = *tok().token_id("<|im_start|>");
  EXPECT_EQ(tok().token_to_piece(im_start), "");
  EXPECT_EQ(tok().token_to_piece(im_start, true), "<|im_start|>");
  const auto ids = tok().encode("<|im_start|>user\nhi<|im_end|>", false, true);
  EXPECT_EQ(tok().decode(ids), "user\nhi");
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), *tok().token_id("<|im_end|>"));
}

TEST_F(SmolLm2Tokenizer, StreamDecoderNeverEmitsBrokenUtf8) {
  const std::vector<std::string> texts = {"👨‍👩‍👧‍👦 family", "日本語のテキスト",
                                          "😀😃😄 and 🇺🇸🇬🇧", "𝕳𝖊𝖑𝖑𝖔 𠀀𠀁", "mixed é 中 😀 text"};
  for (const std::string& text : texts) {
    const auto ids = tok().encode(text, false, false);
    StreamDecoder dec(tok());
    std::string all;
    bool saw_partial = false;  // some token ended mid-character
    for (int32_t id : ids) {
      const std::string piece = tok().token_to_piece(id);
      if (!unicode::is_valid_utf8(piece)) saw_partial = true;
      const std::string out = dec.push(id);
      EXPECT_TRUE(unicode::is_valid_utf8(out)) << text;
      all += out;
    }
    const std::string rest = dec.flush();
    EXPECT_TRUE(unicode::is_valid_utf8(rest));
    EXPECT_EQ(rest, "");
    all += rest;
    EXPECT_EQ(all, text);
    if (!model_env_set() && (text.rfind("日本語", 0) == 0 || text.rfind("👨", 0) == 0)) {
      EXPECT_TRUE(saw_partial) << "expected a character split across tokens in: " << text;
    }
  }
}

}  // namespace
}  // namespace omnibus
