// BpeTokenizer on small hand-made vocabularies: merge order, special tokens,
// pieces, metadata defaults and errors. tokenizer_test.cc checks a real model
// against llama.cpp.
#include "tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/byte_level.h"
#include "tokenizer/byte_level_test_vocab.h"

namespace omnibus {
namespace {

// Raw bytes -> their byte-level alphabet spelling ("a b" -> "aĠb").
std::string bl(std::string_view raw) { return byte_level::spell(raw); }

// Specials (ids 0..3), the 256 byte symbols (ids 4..259), then `extra` tokens.
TokenizerVocab make_vocab(const std::vector<std::string>& merges,
                          const std::vector<std::string>& extra) {
  return byte_level_test_vocab(
      {{"<|endoftext|>", 3}, {"<|im_start|>", 3}, {"<|im_end|>", 3}, {"<user>", 4}}, extra, merges);
}

int32_t byte_id(char c) { return 4 + static_cast<uint8_t>(c); }

std::unique_ptr<Tokenizer> make(TokenizerVocab v) {
  auto t = Tokenizer::from_vocab(std::move(v));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

TEST(BpeTokenizer, MergesApplyInRankOrder) {
  // ids: 260 "he", 261 "ll", 262 "hell", 263 "hello", 264 "Ġhello"
  auto tok = make(make_vocab({"h e", "l l", "he ll", "hell o", bl(" ") + " hello"},
                             {"he", "ll", "hell", "hello", bl(" hello")}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("hello", false, false), (std::vector<int32_t>{263}));
  EXPECT_EQ(tok->encode("hello hello", false, false), (std::vector<int32_t>{263, 264}));
  EXPECT_EQ(tok->encode("help", false, false),
            (std::vector<int32_t>{260, byte_id('l'), byte_id('p')}));
}

TEST(BpeTokenizer, LowerRankWinsOverPosition) {
  auto ab_first = make(make_vocab({"a b", "b c"}, {"ab", "bc"}));
  auto bc_first = make(make_vocab({"b c", "a b"}, {"ab", "bc"}));
  ASSERT_TRUE(ab_first && bc_first);
  EXPECT_EQ(ab_first->encode("abc", false, false), (std::vector<int32_t>{260, byte_id('c')}));
  EXPECT_EQ(bc_first->encode("abc", false, false), (std::vector<int32_t>{byte_id('a'), 261}));
}

TEST(BpeTokenizer, EqualRanksMergeLeftmostFirst) {
  auto tok = make(make_vocab({"a a"}, {"aa"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("aaa", false, false), (std::vector<int32_t>{260, byte_id('a')}));
  EXPECT_EQ(tok->encode("aaaa", false, false), (std::vector<int32_t>{260, 260}));
}

TEST(BpeTokenizer, MergeResultOutsideVocabFallsBackToBytes) {
  // "x y" yields "xy", which is not a token: emitted as its one-byte tokens.
  auto tok = make(make_vocab({"x y"}, {}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("xy", false, false), (std::vector<int32_t>{byte_id('x'), byte_id('y')}));
}

TEST(BpeTokenizer, MergesNeverCrossWords) {
  auto tok = make(make_vocab({"a " + bl(" "), bl(" ") + " b"}, {"a" + bl(" "), bl(" b")}));
  ASSERT_TRUE(tok);
  // Words: "a", " b" -> "a" alone, then "Ġb".
  EXPECT_EQ(tok->encode("a b", false, false), (std::vector<int32_t>{byte_id('a'), 261}));
}

TEST(BpeTokenizer, SpecialTokensSplitOnlyWhenAsked) {
  auto tok = make(make_vocab({}, {}));
  ASSERT_TRUE(tok);
  const std::string text = "<|im_start|>hi<|im_end|>";
  EXPECT_EQ(tok->encode(text, false, true),
            (std::vector<int32_t>{1, byte_id('h'), byte_id('i'), 2}));
  const auto plain = tok->encode(text, false, false);
  EXPECT_EQ(plain.size(), text.size());  // every byte its own token here
  for (int32_t id : plain) EXPECT_FALSE(tok->is_special(id));
  // User-defined tokens are matched either way.
  EXPECT_EQ(tok->encode("a<user>b", false, false),
            (std::vector<int32_t>{byte_id('a'), 3, byte_id('b')}));
  EXPECT_EQ(tok->encode("a<user>b", false, true),
            (std::vector<int32_t>{byte_id('a'), 3, byte_id('b')}));
}

TEST(BpeTokenizer, LongerSpecialTokenWins) {
  auto v = make_vocab({}, {});
  v.tokens.push_back("<|im_start|>x");
  v.token_types.push_back(3);  // id 260
  auto tok = make(std::move(v));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("<|im_start|>x<|im_start|>", false, true), (std::vector<int32_t>{260, 1}));
}

TEST(BpeTokenizer, PiecesAndDecode) {
  auto tok = make(make_vocab({bl(" ") + " h"}, {bl(" h")}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->token_to_piece(260), " h");
  EXPECT_EQ(tok->token_to_piece(byte_id('\n')), "\n");
  EXPECT_EQ(tok->token_to_piece(byte_id('\xF0')), "\xF0");
  EXPECT_EQ(tok->token_to_piece(2), "");
  EXPECT_EQ(tok->token_to_piece(2, true), "<|im_end|>");
  EXPECT_EQ(tok->token_to_piece(3), "<user>");  // user-defined: always its text
  EXPECT_EQ(tok->token_to_piece(-1), "");
  EXPECT_EQ(tok->token_to_piece(100000), "");
  const std::string text = "a h\tb\n日本 😀";
  EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text);
  EXPECT_EQ(tok->decode({1, 260, 2}, true), "<|im_start|> h<|im_end|>");
  EXPECT_EQ(tok->decode({1, 260, 2}, false), " h");
}

TEST(BpeTokenizer, Llama3WordThatIsATokenSkipsMerges) {
  // "abc" is token 262 but no merge builds it ("a b" makes 260 "ab", and no
  // "ab c"): under llama-bpe (llama.cpp's ignore_merges) the word is that
  // token; under dbrx (same regex, merges always) and smollm it is merged.
  auto v = make_vocab({"a b", "b c"}, {"ab", "bc", "abc"});
  for (const char* pre : {"dbrx", "smollm"}) {
    v.pre = pre;
    auto tok = make(v);
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{260, byte_id('c')})) << pre;
  }
  v.pre = "llama-bpe";
  auto tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{262}));
  EXPECT_EQ(tok->encode("abc abcd", false, false),  // " abcd" is no token: merged
            (std::vector<int32_t>{262, byte_id(' '), 260, byte_id('c'), byte_id('d')}));
}

TEST(BpeTokenizer, Llama3AddsBosUnlessTheGgufSaysNo) {
  auto v = make_vocab({}, {});
  v.pre = "llama-bpe";
  v.bos_id = 1;
  auto tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("a", true, true), (std::vector<int32_t>{1, byte_id('a')}));
  v.add_bos = false;
  tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_FALSE(tok->add_bos());
  v.add_bos.reset();
  v.pre = "qwen2";
  tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_FALSE(tok->add_bos());
}

TEST(BpeTokenizer, InvalidUtf8BecomesReplacementChar) {
  auto tok = make(make_vocab({}, {}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode(tok->encode("a\xFF"
                                    "b",
                                    false, false)),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(BpeTokenizer, MetadataDefaultsForGpt2) {
  auto v = make_vocab({}, {});
  auto tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_FALSE(tok->add_bos());  // gpt2 default
  EXPECT_FALSE(tok->add_eos());
  EXPECT_EQ(tok->bos_id(), 11);  // llama.cpp's gpt2 default id
  EXPECT_EQ(tok->encode("", true, true), (std::vector<int32_t>{}));

  v.add_bos = true;
  tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("", true, true), (std::vector<int32_t>{11}));

  v.add_bos = false;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_eos = true;
  tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("a", true, true), (std::vector<int32_t>{byte_id('a'), 2}));
  EXPECT_EQ(tok->encode("a", false, true), (std::vector<int32_t>{byte_id('a')}));

  v.bos_id = 999999;  // out of range: ignored, the default stays
  tok = make(v);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->bos_id(), 11);
}

TEST(BpeTokenizer, EndOfGeneration) {
  auto v = make_vocab({}, {});
  v.eos_id = 2;
  v.tokens.push_back("<reponame>");  // id 260, a FIM repo token by name
  v.token_types.push_back(1);
  v.tokens.push_back("<|eot_id|>");  // id 261, normal type but a known EOG name
  v.token_types.push_back(1);
  auto tok = make(std::move(v));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->eog_ids(), (std::vector<int32_t>{0, 2, 260, 261}));
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_TRUE(tok->is_special(261));  // made a control token
  EXPECT_EQ(tok->token_to_piece(261), "");
  EXPECT_EQ(tok->token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok->token_id(bl(" ")), byte_id(' '));
  EXPECT_EQ(tok->token_id("nope"), std::nullopt);
}

TEST(BpeTokenizer, RejectsWhatItCannotRead) {
  auto v = make_vocab({}, {});
  v.model = "ugm";  // "llama" (SentencePiece) is supported since spm_tokenizer.cc
  EXPECT_EQ(Tokenizer::from_vocab(v).status().code(), StatusCode::kUnsupported);
  v.model = "wordpiece";
  EXPECT_EQ(Tokenizer::from_vocab(v).status().code(), StatusCode::kUnsupported);
  v.model = "gpt2";
  v.pre = "no-such-pre";
  EXPECT_EQ(Tokenizer::from_vocab(v).status().code(), StatusCode::kUnsupported);
  v.pre = "smollm";
  v.tokens.push_back("<|im_end|>");  // duplicate
  v.token_types.push_back(3);
  EXPECT_EQ(Tokenizer::from_vocab(v).status().code(), StatusCode::kCorrupt);
  TokenizerVocab empty;
  empty.model = "gpt2";
  empty.pre = "smollm";
  EXPECT_EQ(Tokenizer::from_vocab(empty).status().code(), StatusCode::kCorrupt);
  auto short_types = make_vocab({}, {});
  short_types.token_types.pop_back();
  EXPECT_EQ(Tokenizer::from_vocab(short_types).status().code(), StatusCode::kCorrupt);
}

TEST(BpeTokenizer, ConcurrentEncodesAgree) {
  auto tok = make(make_vocab({"h e", "l l", "he ll", "hell o"}, {"he", "ll", "hell", "hello"}));
  ASSERT_TRUE(tok);
  const std::string text = "hello <|im_start|> hello 123 日本 😀 hello";
  const auto expected = tok->encode(text, true, true);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (tok->encode(text, true, true) != expected) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(StreamDecoder, HoldsSplitCharactersUntilComplete) {
  auto tok = make(make_vocab({}, {}));
  ASSERT_TRUE(tok);
  StreamDecoder dec(*tok);
  EXPECT_EQ(dec.push(byte_id('a')), "a");
  EXPECT_EQ(dec.push(byte_id('\xF0')), "");
  EXPECT_EQ(dec.push(byte_id('\x9F')), "");
  EXPECT_EQ(dec.push(byte_id('\x98')), "");
  EXPECT_EQ(dec.push(byte_id('\x80')), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.push(2), "");  // control token, not rendered
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, ReplacesBytesThatCannotBecomeValid) {
  auto tok = make(make_vocab({}, {}));
  ASSERT_TRUE(tok);
  StreamDecoder dec(*tok, /*render_special=*/true);
  EXPECT_EQ(dec.push(byte_id('\x80')), "\xEF\xBF\xBD");  // stray continuation
  EXPECT_EQ(dec.push(byte_id('\xE6')), "");
  EXPECT_EQ(dec.push(byte_id('x')), "\xEF\xBF\xBDx");  // broken sequence
  EXPECT_EQ(dec.push(2), "<|im_end|>");
  EXPECT_EQ(dec.push(byte_id('\xE6')), "");
  EXPECT_EQ(dec.push(byte_id('\x97')), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");  // incomplete at the end
  EXPECT_EQ(dec.flush(), "");
}

}  // namespace
}  // namespace omnibus
