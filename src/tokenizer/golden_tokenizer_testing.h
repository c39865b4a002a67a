// Tests only: a model's tokenizer, read from its GGUF, against llama.cpp's
// answers for it (tests/golden/tokenizer/<model>.json, made by
// tools/golden/gen_tokenizer_golden.py; docs/tokenizer.md). Shared by the
// golden suites of every tokenizer (SmolLM2's BPE in tokenizer_test.cc,
// Gemma 3's SentencePiece in spm_tokenizer_test.cc).
//
// A suite derives from GoldenTokenizerTest<Suite>, where Suite provides
//   static std::string model_path();   // the GGUF (tests skip when missing)
//   static std::string golden_path();  // llama.cpp's answers
// The tokenizer and golden data are loaded once per suite.
//
// A golden file may record the GGUF's sha256 ("model_sha256"): the suite then
// fails on a GGUF with another one (a stale or differently made file).
//
// A golden file holds the vocabulary's facts (n_vocab, bos_id, eos_id,
// add_bos, add_eos, eog_ids, control_ids) and "cases": each a string ("text",
// or "text_hex" for bytes that are not valid UTF-8) with llama.cpp's ids with
// special-token parsing ("special"), without ("plain") and, for some, with BOS
// / EOS added ("add_special").
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "util/sha256.h"
#include "util/testdata.h"

namespace omnibus::golden_tokenizer {

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The text of one golden case.
inline std::string case_text(const nlohmann::json& c) {
  return c.contains("text") ? c["text"].get<std::string>()
                            : from_hex(c["text_hex"].get<std::string>());
}

inline std::string golden_path(const std::string& model_name) {
  return testdata::source_dir() + "/tests/golden/tokenizer/" + model_name + ".json";
}

// The vocabulary's facts equal the golden file's.
inline void expect_vocabulary_facts(const Tokenizer& tok, const nlohmann::json& g) {
  EXPECT_EQ(tok.n_vocab(), g["n_vocab"].get<int32_t>());
  EXPECT_EQ(tok.bos_id(), g["bos_id"].get<int32_t>());
  EXPECT_EQ(tok.eos_id(), g["eos_id"].get<int32_t>());
  EXPECT_EQ(tok.add_bos(), g["add_bos"].get<bool>());
  EXPECT_EQ(tok.add_eos(), g["add_eos"].get<bool>());
  EXPECT_EQ(tok.eog_ids(), g["eog_ids"].get<std::vector<int32_t>>());
  std::vector<int32_t> control;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.vocab().attr(id) & kAttrControl) {
      control.push_back(id);
      EXPECT_TRUE(tok.is_special(id));
    }
  }
  EXPECT_EQ(control, g["control_ids"].get<std::vector<int32_t>>());
}

// Every case encodes to llama.cpp's ids (with and without special-token
// parsing, and with BOS / EOS where the case has them); at least min_cases
// cases; stops after 20 failing ones.
inline void expect_ids_match(const Tokenizer& tok, const nlohmann::json& cases, size_t min_cases) {
  ASSERT_GE(cases.size(), min_cases);
  int failures = 0;
  for (const auto& c : cases) {
    const std::string text = case_text(c);
    EXPECT_EQ(tok.encode(text, false, true), c["special"].get<std::vector<int32_t>>())
        << "parse_special, text: " << c.dump();
    EXPECT_EQ(tok.encode(text, false, false), c["plain"].get<std::vector<int32_t>>())
        << "plain, text: " << c.dump();
    if (c.contains("add_special")) {
      EXPECT_EQ(tok.encode(text, true, true), c["add_special"].get<std::vector<int32_t>>())
          << "add_special, text: " << c.dump();
    }
    if (::testing::Test::HasFailure() && ++failures > 20) break;
  }
}

template <typename Suite>
class GoldenTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model = Suite::model_path();
    if (!testdata::file_exists(model)) return;
    auto file = GgufFile::open(model);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    auto tok = Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    std::ifstream in(Suite::golden_path());
    ASSERT_TRUE(in.good()) << Suite::golden_path() << " missing";
    auto golden = std::make_unique<nlohmann::json>(nlohmann::json::parse(in));
    if (golden->contains("model_sha256")) {
      const auto sha = sha256_file_hex(model);
      ASSERT_TRUE(sha.has_value()) << model << " unreadable";
      ASSERT_EQ(*sha, (*golden)["model_sha256"].get<std::string>())
          << model << " is not the GGUF " << Suite::golden_path()
          << " was made from (delete it and rerun scripts/fetch_models.sh)";
    }
    golden_ = std::move(golden);
    tok_ = std::move(tok).value();
  }
  static void TearDownTestSuite() {
    tok_.reset();
    golden_.reset();
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << Suite::model_path() << " not found (scripts/fetch_models.sh)";
  }

  static const Tokenizer& tok() { return *tok_; }
  static const nlohmann::json& golden() { return *golden_; }

 private:
  static inline std::unique_ptr<Tokenizer> tok_;
  static inline std::unique_ptr<nlohmann::json> golden_;
};

}  // namespace omnibus::golden_tokenizer
