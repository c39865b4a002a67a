// SentencePiece tokenization: the algorithm on a hand-made vocabulary, and the
// Gemma 3 tokenizer read from the bundled GGUF against llama.cpp's answers
// (tests/golden/tokenizer/gemma3-270m.json, made by
// tools/golden/gen_tokenizer_golden.py --extra-strings gemma3). The golden
// tests are skipped when the model is missing.
#include "tokenizer/spm_tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tokenizer/golden_tokenizer_testing.h"
#include "tokenizer/unicode.h"

namespace omnibus {
namespace {

const std::string kMarker = "\xE2\x96\x81";  // "▁"

// <unk> <s> </s>, the 256 byte tokens, then `pieces` (normal, score = given).
// No space prefix unless a test asks for it.
TokenizerVocab make_vocab(const std::vector<std::pair<std::string, float>>& pieces,
                          bool add_space_prefix = false) {
  TokenizerVocab v;
  v.model = "llama";
  v.add_space_prefix = add_space_prefix;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {2, 3, 3};
  v.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.token_types.push_back(6);
    v.scores.push_back(0);
  }
  for (const auto& [text, score] : pieces) {
    v.tokens.push_back(text);
    v.token_types.push_back(1);
    v.scores.push_back(score);
  }
  return v;
}

constexpr int32_t kFirstPiece = 3 + 256;
int32_t byte_id(uint8_t b) { return 3 + b; }

std::unique_ptr<Tokenizer> build(TokenizerVocab v) {
  auto tok = Tokenizer::from_vocab(std::move(v));
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  return std::move(tok).value();
}

TEST(SpmTokenizer, MergesHighestScoreFirst) {
  // "abc": "ab" (-1) beats "bc" (-2); then "abc" is not a token, so [ab, c].
  auto tok = build(make_vocab({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -1}, {"bc", -2}}));
  EXPECT_EQ(tok->encode("abc", false, false),
            (std::vector<int32_t>{kFirstPiece + 3, kFirstPiece + 2}));
  // With "bc" scoring higher the split flips.
  auto tok2 = build(make_vocab({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -3}, {"bc", -2}}));
  EXPECT_EQ(tok2->encode("abc", false, false),
            (std::vector<int32_t>{kFirstPiece + 0, kFirstPiece + 4}));
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  // "aaa": "aa" at 0 and at 1 tie; the leftmost wins -> [aa, a].
  auto tok = build(make_vocab({{"a", -5}, {"aa", -1}}));
  EXPECT_EQ(tok->encode("aaa", false, false), (std::vector<int32_t>{kFirstPiece + 1, kFirstPiece}));
}

TEST(SpmTokenizer, SpacePrefixAndMarker) {
  auto v = make_vocab({{kMarker + "hi", -1}, {kMarker, -3}, {"h", -4}, {"i", -4}, {"hi", -2}});
  v.add_space_prefix.reset();
  auto with_prefix = build(v);  // add_space_prefix defaults to true
  EXPECT_EQ(with_prefix->encode("hi hi", false, false),
            (std::vector<int32_t>{kFirstPiece, kFirstPiece}));
  EXPECT_EQ(with_prefix->decode(with_prefix->encode("hi hi", false, false)), " hi hi");
  v.add_space_prefix = false;
  auto without = build(v);
  EXPECT_EQ(without->encode("hi hi", false, false),
            (std::vector<int32_t>{kFirstPiece + 4, kFirstPiece}));
}

TEST(SpmTokenizer, ByteFallbackForUnknownCharacters) {
  auto v = make_vocab({{"a", -1}});
  auto tok = build(v);
  // "é" (C3 A9) is not a token: its bytes are.
  EXPECT_EQ(tok->encode("a\xC3\xA9", false, false),
            (std::vector<int32_t>{kFirstPiece, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(tok->decode(tok->encode("a\xC3\xA9", false, false)), "a\xC3\xA9");
  // A space with no marker token falls back to the marker's bytes.
  EXPECT_EQ(tok->encode(" ", false, false),
            (std::vector<int32_t>{byte_id(0xE2), byte_id(0x96), byte_id(0x81)}));
  // Invalid UTF-8 is kept byte for byte (llama.cpp does not replace it).
  EXPECT_EQ(tok->encode("\xFF", false, false), (std::vector<int32_t>{byte_id(0xFF)}));
}

TEST(SpmTokenizer, SpecialTokensAndBos) {
  auto v = make_vocab({{kMarker + "x", -1}, {"x", -2}}, /*add_space_prefix=*/true);
  auto tok = build(v);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->add_bos());
  // The fragment after a special token gets the space prefix again.
  EXPECT_EQ(tok->encode("x</s>x", true, true),
            (std::vector<int32_t>{1, kFirstPiece, 2, kFirstPiece}));
  // "</s>" as plain text: "▁x", four byte tokens, "x".
  EXPECT_EQ(tok->encode("x</s>x", false, false).size(), 6u);
  EXPECT_EQ(tok->token_to_piece(2), "");
  EXPECT_EQ(tok->token_to_piece(2, true), "</s>");
  EXPECT_TRUE(tok->is_eog(2));
}

TEST(SpmTokenizer, RejectsVocabularyWithoutByteTokens) {
  TokenizerVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "a"};
  EXPECT_EQ(Tokenizer::from_vocab(v).status().code(), StatusCode::kCorrupt);
}

// ---------------------------------------------------------------- Gemma 3

class Gemma3Tokenizer : public golden_tokenizer::GoldenTokenizerTest<Gemma3Tokenizer> {
 public:
  static std::string model_path() { return testdata::model_path("gemma3-270m.gguf"); }
  static std::string golden_path() { return golden_tokenizer::golden_path("gemma3-270m"); }
};

using golden_tokenizer::case_text;

TEST_F(Gemma3Tokenizer, VocabularyFacts) {
  golden_tokenizer::expect_vocabulary_facts(tok(), golden());
  const auto eot = tok().token_id("<end_of_turn>");
  ASSERT_TRUE(eot.has_value());
  EXPECT_TRUE(tok().is_eog(*eot));
  EXPECT_FALSE(tok().is_eog(*tok().token_id("<start_of_turn>")));
  EXPECT_FALSE(static_cast<const SpmTokenizer&>(tok()).add_space_prefix());
}

TEST_F(Gemma3Tokenizer, MatchesLlamaCppOnEveryGoldenString) {
  golden_tokenizer::expect_ids_match(tok(), golden()["cases"], 100);
}

TEST_F(Gemma3Tokenizer, DecodeInvertsEncode) {
  for (const auto& c : golden()["cases"]) {
    const std::string text = case_text(c);
    if (text.find(kMarker) != std::string::npos) continue;  // a literal "▁" decodes as ' '
    // Invalid UTF-8: a bad lead byte swallows the next bytes into one symbol,
    // spelled as byte tokens, escaped "▁" included (as in llama.cpp).
    if (!unicode::is_valid_utf8(text)) continue;
    EXPECT_EQ(tok().decode(tok().encode(text, false, false)), text) << c.dump();
    EXPECT_EQ(tok().decode(tok().encode(text, false, true), /*render_special=*/true), text)
        << c.dump();
  }
}

TEST_F(Gemma3Tokenizer, ChatTurnPieces) {
  const auto ids = tok().encode("<start_of_turn>user\nhi<end_of_turn>\n", true, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], tok().bos_id());
  EXPECT_EQ(ids[1], *tok().token_id("<start_of_turn>"));
  EXPECT_EQ(tok().decode(ids), "user\nhi\n");
  EXPECT_EQ(tok().decode(ids, true), "<bos><start_of_turn>user\nhi<end_of_turn>\n");
}

}  // namespace
}  // namespace omnibus
