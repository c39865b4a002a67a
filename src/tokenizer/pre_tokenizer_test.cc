#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenizer/unicode.h"

namespace omnibus {
namespace {

std::vector<std::string> split(PreTokenizerKind kind, const std::string& text) {
  const std::vector<uint32_t> cps = unicode::decode_utf8_lenient(text);
  std::vector<uint32_t> lens;
  pre_tokenize(kind, cps, &lens);
  std::vector<std::string> words;
  size_t pos = 0;
  for (uint32_t len : lens) {
    EXPECT_GT(len, 0u);
    std::string w;
    for (size_t i = pos; i < pos + len; ++i) unicode::append_utf8(&w, cps[i]);
    words.push_back(w);
    pos += len;
  }
  EXPECT_EQ(pos, cps.size());
  return words;
}

using W = std::vector<std::string>;

TEST(PreTokenizer, NamesMapToKinds) {
  EXPECT_EQ(pre_tokenizer_for("smollm"), PreTokenizerKind::kSmollm);
  EXPECT_EQ(pre_tokenizer_for("starcoder"), PreTokenizerKind::kSmollm);
  EXPECT_EQ(pre_tokenizer_for("gpt-2"), PreTokenizerKind::kGpt2);
  EXPECT_EQ(pre_tokenizer_for("llama-bpe"), std::nullopt);
  EXPECT_EQ(pre_tokenizer_for(""), std::nullopt);
}

TEST(PreTokenizer, Gpt2Words) {
  const auto k = PreTokenizerKind::kGpt2;
  EXPECT_EQ(split(k, "Hello world"), (W{"Hello", " world"}));
  EXPECT_EQ(split(k, "I'm here's"), (W{"I", "'m", " here", "'s"}));
  EXPECT_EQ(split(k, "I'M"), (W{"I", "'", "M"}));  // contractions are case-sensitive
  EXPECT_EQ(split(k, "abc 123 !!"), (W{"abc", " 123", " !!"}));
  EXPECT_EQ(split(k, "a   b"), (W{"a", "  ", " b"}));  // \s+(?!\S) leaves one space
  EXPECT_EQ(split(k, "a   "), (W{"a", "   "}));
  EXPECT_EQ(split(k, "x\n\n y"), (W{"x", "\n\n", " y"}));
  EXPECT_EQ(split(k, "café"), (W{"café"}));
  EXPECT_EQ(split(k, "日本 語"), (W{"日本", " 語"}));
  EXPECT_EQ(split(k, " 😀😀!"), (W{" 😀😀!"}));
  EXPECT_EQ(split(k, ""), W{});
}

TEST(PreTokenizer, Gpt2NewlineBeforeLetterIsItsOwnWord) {
  // "\n" is whitespace, so " ?\p{L}+" cannot take it: "\n" then "b".
  EXPECT_EQ(split(PreTokenizerKind::kGpt2, "a\nb"), (W{"a", "\n", "b"}));
  EXPECT_EQ(split(PreTokenizerKind::kGpt2, "a\n\nb"), (W{"a", "\n", "\n", "b"}));
}

TEST(PreTokenizer, SmollmIsolatesDigits) {
  const auto k = PreTokenizerKind::kSmollm;
  EXPECT_EQ(split(k, "12345"), (W{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(k, "abc 123"), (W{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(split(k, "x²"), (W{"x", "²"}));
  // A piece ends at a digit, so trailing spaces before it are one word.
  EXPECT_EQ(split(k, "a  1"), (W{"a", "  ", "1"}));
  EXPECT_EQ(split(k, "v2.0"), (W{"v", "2", ".", "0"}));
}

}  // namespace
}  // namespace omnibus
