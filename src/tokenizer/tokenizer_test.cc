// The SmolLM2 tokenizer read from the bundled GGUF against llama.cpp's answers
// (tests/golden/tokenizer/smollm2-135m.json, made by
// tools/golden/gen_tokenizer_golden.py). Skipped when the model is missing.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "tokenizer/unicode.h"

namespace omnibus {
namespace {

std::string source_dir() {
  if (const char* env = std::getenv("OMNIBUS_SOURCE_DIR")) return env;
  return OMNIBUS_SOURCE_DIR;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

class SmolLm2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // OMNIBUS_TOKENIZER_MODEL / OMNIBUS_TOKENIZER_GOLDEN: check another model
    // against its own golden file (one-off runs; see docs/tokenizer.md).
    const char* model_env = std::getenv("OMNIBUS_TOKENIZER_MODEL");
    const std::string model = model_env ? model_env : source_dir() + "/models/smollm2-135m.gguf";
    if (!std::ifstream(model).good()) return;
    auto file = GgufFile::open(model);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    tok_ = std::move(tok).value().release();

    const char* golden_env = std::getenv("OMNIBUS_TOKENIZER_GOLDEN");
    std::ifstream in(golden_env ? std::string(golden_env)
                                : source_dir() + "/tests/golden/tokenizer/smollm2-135m.json");
    ASSERT_TRUE(in.good()) << "golden file missing";
    golden_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete golden_;
    tok_ = nullptr;
    golden_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "models/smollm2-135m.gguf not found (run scripts to fetch models)";
  }

  static bool model_env_set() { return std::getenv("OMNIBUS_TOKENIZER_MODEL") != nullptr; }

  static std::string case_text(const nlohmann::json& c) {
    return c.contains("text") ? c["text"].get<std::string>() : from_hex(c["text_hex"].get<std::string>());
  }

  static inline Tokenizer* tok_ = nullptr;
  static inline nlohmann::json* golden_ = nullptr;
};

TEST_F(SmolLm2Tokenizer, VocabularyFacts) {
  const auto& g = *golden_;
  EXPECT_EQ(tok_->n_vocab(), g["n_vocab"].get<int32_t>());
  EXPECT_EQ(tok_->bos_id(), g["bos_id"].get<int32_t>());
  EXPECT_EQ(tok_->eos_id(), g["eos_id"].get<int32_t>());
  EXPECT_EQ(tok_->add_bos(), g["add_bos"].get<bool>());
  EXPECT_EQ(tok_->add_eos(), g["add_eos"].get<bool>());
  EXPECT_EQ(tok_->eog_ids(), g["eog_ids"].get<std::vector<int32_t>>());
  if (!model_env_set()) {  // SmolLM2: <|im_end|> ends a turn
    const auto im_end = tok_->token_id("<|im_end|>");
    ASSERT_TRUE(im_end.has_value());
    EXPECT_TRUE(tok_->is_eog(*im_end));
    EXPECT_FALSE(tok_->is_eog(*tok_->token_id("<|im_start|>")));
  }
  std::vector<int32_t> control;
  for (int32_t id = 0; id < tok_->n_vocab(); ++id) {
    if (tok_->vocab().attr(id) & kAttrControl) {
      control.push_back(id);
      EXPECT_TRUE(tok_->is_special(id));
    }
  }
  EXPECT_EQ(control, g["control_ids"].get<std::vector<int32_t>>());
}

TEST_F(SmolLm2Tokenizer, MatchesLlamaCppOnEveryGoldenString) {
  const auto& cases = (*golden_)["cases"];
  ASSERT_GE(cases.size(), 150u);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = case_text(c);
    const auto special = c["special"].get<std::vector<int32_t>>();
    const auto plain = c["plain"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok_->encode(text, false, true), special) << "parse_special, text: " << c.dump();
    EXPECT_EQ(tok_->encode(text, false, false), plain) << "plain, text: " << c.dump();
    if (c.contains("add_special")) {
      EXPECT_EQ(tok_->encode(text, true, true), c["add_special"].get<std::vector<int32_t>>())
          << "add_special, text: " << c.dump();
    }
    if (::testing::Test::HasFailure() && ++failures > 20) break;
  }
}

TEST_F(SmolLm2Tokenizer, DecodeInvertsEncode) {
  for (const auto& c : (*golden_)["cases"]) {
    const std::string text = case_text(c);
    if (!unicode::is_valid_utf8(text)) continue;  // invalid bytes come back as U+FFFD
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, false)), text) << c.dump();
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, true), /*render_special=*/true), text) << c.dump();
  }
}

TEST_F(SmolLm2Tokenizer, SpecialTokenPieces) {
  if (model_env_set()) GTEST_SKIP() << "SmolLM2 only";
  const int32_t im_start = *tok_->token_id("<|im_start|>");
  EXPECT_EQ(tok_->token_to_piece(im_start), "");
  EXPECT_EQ(tok_->token_to_piece(im_start, true), "<|im_start|>");
  const auto ids = tok_->encode("<|im_start|>user\nhi<|im_end|>", false, true);
  EXPECT_EQ(tok_->decode(ids), "user\nhi");
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), *tok_->token_id("<|im_end|>"));
}

TEST_F(SmolLm2Tokenizer, StreamDecoderNeverEmitsBrokenUtf8) {
  const std::vector<std::string> texts = {
      "👨‍👩‍👧‍👦 family", "日本語のテキスト", "😀😃😄 and 🇺🇸🇬🇧", "𝕳𝖊𝖑𝖑𝖔 𠀀𠀁", "mixed é 中 😀 text"};
  for (const std::string& text : texts) {
    const auto ids = tok_->encode(text, false, false);
    StreamDecoder dec(*tok_);
    std::string all;
    bool saw_partial = false;  // some token ended mid-character
    for (int32_t id : ids) {
      const std::string piece = tok_->token_to_piece(id);
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
