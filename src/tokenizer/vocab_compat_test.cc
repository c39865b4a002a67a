// check_same_vocabulary: equal vocabularies pass, padded ones within 128
// pass, and a size gap, other specials or another token text are refused.
#include "tokenizer/vocab_compat.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/byte_level_test_vocab.h"

namespace omnibus {
namespace {

std::unique_ptr<Tokenizer> make(const std::vector<std::string>& extra, int32_t eos = 0) {
  TokenizerVocab v = byte_level_test_vocab({{"<|endoftext|>", 3}, {"<|im_end|>", 3}}, extra, {});
  v.eos_id = eos;
  auto t = Tokenizer::from_vocab(std::move(v));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

std::vector<std::string> pads(int n) {
  std::vector<std::string> p;
  for (int i = 0; i < n; ++i) p.push_back("<pad" + std::to_string(i) + ">");
  return p;
}

TEST(VocabCompat, SameAndPaddedVocabulariesAgree) {
  auto a = make({"he", "ll"}), b = make({"he", "ll"});
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(check_same_vocabulary(*a, *b).is_ok());
  std::vector<std::string> padded = {"he", "ll"};
  for (const std::string& p : pads(100)) padded.push_back(p);
  auto c = make(padded);
  EXPECT_TRUE(check_same_vocabulary(*a, *c).is_ok());
  EXPECT_TRUE(check_same_vocabulary(*c, *a).is_ok());
}

TEST(VocabCompat, RefusesWhatReadsDifferently) {
  auto a = make({"he", "ll"});
  std::vector<std::string> big = {"he", "ll"};
  for (const std::string& p : pads(200)) big.push_back(p);
  auto far = make(big), other_text = make({"he", "lo"}), other_eos = make({"he", "ll"}, 1);
  ASSERT_TRUE(a && far && other_text && other_eos);
  const Status size = check_same_vocabulary(*a, *far);
  EXPECT_EQ(size.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("more than 128 apart"), std::string::npos) << size.message();
  const Status text = check_same_vocabulary(*a, *other_text);
  EXPECT_EQ(text.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(text.message().find("'lo'"), std::string::npos) << text.message();
  EXPECT_EQ(check_same_vocabulary(*a, *other_eos).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace omnibus
