// WordPiece (tokenizer.ggml.model "bert"): the rules on a small vocabulary,
// and all-MiniLM-L6-v2's tokenizer against llama.cpp's ids on the 200
// sentences of tests/golden/embeddings/all-minilm-l6-v2.json (made by
// tools/golden/gen_embedding_golden.py).
#include "tokenizer/wordpiece_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"
#include "util/sha256.h"
#include "util/testdata.h"

namespace omnibus {
namespace {

const std::string kSp = "\xE2\x96\x81";  // the phantom space

// [PAD] [UNK] [CLS] [SEP], then word-initial and continuation pieces.
std::unique_ptr<Tokenizer> small_bert() {
  TokenizerVocab v;
  v.model = "bert";
  v.tokens = {
      "[PAD]",  "[UNK]", "[CLS]",   "[SEP]",      kSp + "hello", kSp + "world",        kSp + "un",
      "believ", "able",  kSp + "!", kSp + "cafe", kSp + "$",     kSp + "\xE4\xB8\xAD", kSp + "a"};
  v.token_types = {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  v.bos_id = 2;
  v.sep_id = 3;
  v.unk_id = 1;
  v.normalizer_lowercase = true;
  auto t = Tokenizer::from_vocab(std::move(v));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

TEST(WordPiece, LongestMatchFromTheLeftWithPhantomSpace) {
  auto tok = small_bert();
  EXPECT_EQ(tok->encode("Hello unbelievable world!", false, true),
            (std::vector<int32_t>{4, 6, 7, 8, 5, 9}));
  // [CLS] first and [SEP] last, always, with add_special.
  EXPECT_EQ(tok->encode("hello", true, true), (std::vector<int32_t>{2, 4, 3}));
}

TEST(WordPiece, NormalisesAndSplitsAsLlamaCpp) {
  auto tok = small_bert();
  // Lowercase and accents stripped (strip_accents defaults to lowercase).
  EXPECT_EQ(tok->encode("CAF\xC3\x89", false, true), (std::vector<int32_t>{10}));
  // ASCII symbols and CJK ideographs are words of their own; control
  // characters vanish; a word that cannot be covered is one [UNK].
  EXPECT_EQ(tok->encode("a$\xE4\xB8\xAD\x07hello xyz", false, true),
            (std::vector<int32_t>{13, 11, 12, 4, 1}));
  const auto* wp = dynamic_cast<const WordPieceTokenizer*>(tok.get());
  ASSERT_NE(wp, nullptr);
  EXPECT_EQ(wp->split_words("  Hi,there\tyou  "),
            (std::vector<std::string>{"hi", ",", "there", "you"}));
  // Decoding turns the phantom space back into a space.
  EXPECT_EQ(tok->decode({4, 6, 7, 8, 5}), " hello unbelievable world");
}

TEST(WordPieceGolden, MiniLmIdsEqualLlamaCpp) {
  const std::string model = testdata::model_path("all-minilm-l6-v2.gguf");
  const std::string golden =
      testdata::source_dir() + "/tests/golden/embeddings/all-minilm-l6-v2.json";
  ASSERT_TRUE(testdata::file_exists(model))
      << model << ": run scripts/fetch_models.sh all-minilm-l6-v2";
  std::ifstream in(golden);
  ASSERT_TRUE(in.good()) << golden;
  const nlohmann::json g = nlohmann::json::parse(in);
  EXPECT_EQ(sha256_file_hex(model).value_or(""), g["model_sha256"].get<std::string>())
      << model << " is not the file the golden data was made from";
  auto file = GgufFile::open(model);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  int n = 0;
  for (const nlohmann::json& c : g["cases"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ((*tok)->encode(text, /*add_special=*/true, /*parse_special=*/true),
              c["ids"].get<std::vector<int32_t>>())
        << "text: " << text;
    ++n;
  }
  EXPECT_EQ(n, 200);
}

}  // namespace
}  // namespace omnibus
