#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/unicode.h"
#include "util/testdata.h"

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
  EXPECT_EQ(pre_tokenizer_for(""), std::nullopt);
  EXPECT_EQ(pre_tokenizer_for("deepseek-llm"), std::nullopt);
  EXPECT_EQ(pre_tokenizer_for("chatglm-bpe"), std::nullopt);  // llama3 regex, but BOS rules differ
}

TEST(PreTokenizer, Llama3AndQwen2Names) {
  for (const char* name : {"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano"}) {
    const auto t = bpe_pre_type(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(t->kind, PreTokenizerKind::kLlama3) << name;
    EXPECT_TRUE(t->ignore_merges) << name;
    EXPECT_TRUE(t->add_bos) << name;
  }
  for (const char* name : {"dbrx", "smaug-bpe"}) {  // the regex without LLAMA3's other settings
    const auto t = bpe_pre_type(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(t->kind, PreTokenizerKind::kLlama3) << name;
    EXPECT_FALSE(t->ignore_merges) << name;
    EXPECT_FALSE(t->add_bos) << name;
  }
  for (const char* name : {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2",
                           "hunyuan", "solar-open", "grok-2"}) {
    const auto t = bpe_pre_type(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(t->kind, PreTokenizerKind::kQwen2) << name;
    EXPECT_FALSE(t->ignore_merges) << name;
    EXPECT_FALSE(t->add_bos) << name;
  }
  EXPECT_FALSE(bpe_pre_type("smollm")->ignore_merges);
  EXPECT_FALSE(bpe_pre_type("gpt-2")->add_bos);
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

// Llama 3 and Qwen 2 share every alternative but the digits one.
class Llama3Family : public ::testing::TestWithParam<PreTokenizerKind> {};

TEST_P(Llama3Family, ContractionsInEitherCase) {
  const auto k = GetParam();
  EXPECT_EQ(split(k, "I'm here's"), (W{"I", "'m", " here", "'s"}));
  EXPECT_EQ(split(k, "I'M HERE'S"), (W{"I", "'M", " HERE", "'S"}));
  EXPECT_EQ(split(k, "they'RE we'Ve you'lL he'D don'T"),
            (W{"they", "'RE", " we", "'Ve", " you", "'lL", " he", "'D", " don", "'T"}));
  EXPECT_EQ(split(k, "'ll'LL'd"), (W{"'ll", "'LL", "'d"}));
  // Not a contraction: the apostrophe leads the letters ([^\r\n\p{L}\p{N}]?\p{L}+).
  EXPECT_EQ(split(k, "rock'n'roll"), (W{"rock", "'n", "'roll"}));
  EXPECT_EQ(split(k, "'x"), (W{"'x"}));
  EXPECT_EQ(split(k, "'r"), (W{"'r"}));  // 're needs its e
  EXPECT_EQ(split(k, "'"), (W{"'"}));
  // Only ASCII letters fold: U+017F (long s) is no 's'.
  EXPECT_EQ(split(k, "'\u017F"), (W{"'\u017F"}));
}

TEST_P(Llama3Family, OneNonLetterLeadsLetters) {
  const auto k = GetParam();
  EXPECT_EQ(split(k, "Hello world"), (W{"Hello", " world"}));
  // " ." is two codepoints: too many to lead "world".
  EXPECT_EQ(split(k, "(hello) .world"), (W{"(hello", ")", " .", "world"}));
  EXPECT_EQ(split(k, "\tx"), (W{"\tx"}));
  EXPECT_EQ(split(k, "!!x"), (W{"!!", "x"}));  // one codepoint only
  EXPECT_EQ(split(k, " !x"), (W{" !", "x"}));
  EXPECT_EQ(split(k, "\nx"), (W{"\n", "x"}));  // never \r or \n
  EXPECT_EQ(split(k, "\rx"), (W{"\r", "x"}));
  EXPECT_EQ(split(k, "7x"), (W{"7", "x"}));  // never a number
}

TEST_P(Llama3Family, UnicodeLettersAndNumbers) {
  const auto k = GetParam();
  EXPECT_EQ(split(k, "café naïve"), (W{"café", " naïve"}));
  EXPECT_EQ(split(k, "日本 語"), (W{"日本", " 語"}));
  EXPECT_EQ(split(k, "Привет, мир!"), (W{"Привет", ",", " мир", "!"}));
  EXPECT_EQ(split(k, " 😀😀!x"), (W{" 😀😀!", "x"}));
  EXPECT_EQ(split(k, "x²"), (W{"x", "²"}));
  EXPECT_EQ(split(k, "«ça»"), (W{"«ça", "»"}));
}

TEST_P(Llama3Family, PunctuationTakesFollowingNewlines) {
  const auto k = GetParam();
  EXPECT_EQ(split(k, "end.\n\nNext"), (W{"end", ".\n\n", "Next"}));
  EXPECT_EQ(split(k, "a ;\r\n b"), (W{"a", " ;\r\n", " b"}));
  EXPECT_EQ(split(k, "x!! \n"), (W{"x", "!!", " \n"}));  // not the space after
  EXPECT_EQ(split(k, "{\n\tx"), (W{"{\n", "\tx"}));
}

TEST_P(Llama3Family, NewlinesTakeTheWhitespaceBeforeThem) {
  const auto k = GetParam();
  // \s*[\r\n]+: up to the run's last \r or \n.
  EXPECT_EQ(split(k, "a\n\nb"), (W{"a", "\n\n", "b"}));
  EXPECT_EQ(split(k, "a \n \n b"), (W{"a", " \n \n", " b"}));
  EXPECT_EQ(split(k, "a\r\n\r\n  \tb"), (W{"a", "\r\n\r\n", "  ", "\tb"}));
  EXPECT_EQ(split(k, "\n\n\n"), (W{"\n\n\n"}));
  EXPECT_EQ(split(k, "  \n  "), (W{"  \n", "  "}));
  EXPECT_EQ(split(k, "x\u3000\ny"), (W{"x", "\u3000\n", "y"}));
}

TEST_P(Llama3Family, SpacesAndTrailingWhitespace) {
  const auto k = GetParam();
  EXPECT_EQ(split(k, "a   b"), (W{"a", "  ", " b"}));  // \s+(?!\S) leaves one
  EXPECT_EQ(split(k, "a   "), (W{"a", "   "}));
  EXPECT_EQ(split(k, "a "), (W{"a", " "}));
  EXPECT_EQ(split(k, "a \t"), (W{"a", " \t"}));
  EXPECT_EQ(split(k, "   "), (W{"   "}));
  EXPECT_EQ(split(k, "a\t\t!"), (W{"a", "\t", "\t", "!"}));  // only a space leads others
  EXPECT_EQ(split(k, "a  !"), (W{"a", " ", " !"}));
  EXPECT_EQ(split(k, ""), W{});
}

INSTANTIATE_TEST_SUITE_P(PreTokenizer, Llama3Family,
                         ::testing::Values(PreTokenizerKind::kLlama3, PreTokenizerKind::kQwen2),
                         [](const auto& param_info) {
                           return param_info.param == PreTokenizerKind::kLlama3 ? "Llama3"
                                                                                : "Qwen2";
                         });

TEST(PreTokenizer, Llama3DigitsInThrees) {
  const auto k = PreTokenizerKind::kLlama3;
  EXPECT_EQ(split(k, "1"), (W{"1"}));
  EXPECT_EQ(split(k, "12"), (W{"12"}));
  EXPECT_EQ(split(k, "123"), (W{"123"}));
  EXPECT_EQ(split(k, "1234"), (W{"123", "4"}));
  EXPECT_EQ(split(k, "1234567"), (W{"123", "456", "7"}));
  EXPECT_EQ(split(k, "abc 12345"), (W{"abc", " ", "123", "45"}));  // no space before digits
  EXPECT_EQ(split(k, "v2.0.10"), (W{"v", "2", ".", "0", ".", "10"}));
  EXPECT_EQ(split(k, "x²³⁴⁵"), (W{"x", "²³⁴", "⁵"}));
  EXPECT_EQ(split(k, "٣٤٥١٢"), (W{"٣٤٥", "١٢"}));
  EXPECT_EQ(split(k, "12ab"), (W{"12", "ab"}));
}

TEST(PreTokenizer, Qwen2DigitsOneByOne) {
  const auto k = PreTokenizerKind::kQwen2;
  EXPECT_EQ(split(k, "1"), (W{"1"}));
  EXPECT_EQ(split(k, "1234567"), (W{"1", "2", "3", "4", "5", "6", "7"}));
  EXPECT_EQ(split(k, "abc 12"), (W{"abc", " ", "1", "2"}));
  EXPECT_EQ(split(k, "٣٤"), (W{"٣", "٤"}));
  EXPECT_EQ(split(k, "12ab"), (W{"1", "2", "ab"}));
}

// Random mixed-script strings split by Python's `regex` module with the very
// regexes llama.cpp lists (tools/golden/gen_pre_tokenizer_golden.py).
TEST(PreTokenizer, Llama3AndQwen2MatchTheRegexOnRandomStrings) {
  const std::string path =
      testdata::source_dir() + "/tests/golden/tokenizer/pre_tokenizer_llama3_qwen2.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " missing";
  const nlohmann::json g = nlohmann::json::parse(in);
  const auto& cases = g["cases"];
  ASSERT_GE(cases.size(), 2000u);
  const std::pair<const char*, PreTokenizerKind> kinds[] = {{"llama3", PreTokenizerKind::kLlama3},
                                                            {"qwen2", PreTokenizerKind::kQwen2}};
  int failures = 0;  // reports the first 20
  for (const auto& c : cases) {
    const std::vector<uint32_t> cps = unicode::decode_utf8_lenient(c["text"].get<std::string>());
    for (const auto& [name, kind] : kinds) {
      std::vector<uint32_t> lens;
      pre_tokenize(kind, cps, &lens);
      const auto expected = c[name].get<std::vector<uint32_t>>();
      if (lens != expected && ++failures <= 20) {
        EXPECT_EQ(lens, expected) << name << ": " << c.dump();
      }
    }
  }
  EXPECT_EQ(failures, 0) << "cases split differently (first 20 above)";
}

}  // namespace
}  // namespace omnibus
