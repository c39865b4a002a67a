#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"

namespace omnibus::unicode {
namespace {

TEST(Unicode, ClassesOfCommonCodepoints) {
  EXPECT_EQ(cp_class('a'), CpClass::kLetter);
  EXPECT_EQ(cp_class('Z'), CpClass::kLetter);
  EXPECT_EQ(cp_class('7'), CpClass::kNumber);
  EXPECT_EQ(cp_class(' '), CpClass::kWhitespace);
  EXPECT_EQ(cp_class('\n'), CpClass::kWhitespace);
  EXPECT_EQ(cp_class('\x0B'), CpClass::kWhitespace);
  EXPECT_EQ(cp_class('\''), CpClass::kOther);
  EXPECT_EQ(cp_class('_'), CpClass::kOther);
  EXPECT_EQ(cp_class(0x1F), CpClass::kOther);     // unit separator is not \s here
  EXPECT_EQ(cp_class(0xE9), CpClass::kLetter);    // é
  EXPECT_EQ(cp_class(0x4E2D), CpClass::kLetter);  // 中
  EXPECT_EQ(cp_class(0xB2), CpClass::kNumber);    // ² (No)
  EXPECT_EQ(cp_class(0x216B), CpClass::kNumber);  // Ⅻ (Nl)
  EXPECT_EQ(cp_class(0x0663), CpClass::kNumber);  // ٣
  EXPECT_EQ(cp_class(0xA0), CpClass::kWhitespace);
  EXPECT_EQ(cp_class(0x3000), CpClass::kWhitespace);
  EXPECT_EQ(cp_class(0x2028), CpClass::kWhitespace);
  EXPECT_EQ(cp_class(0x200D), CpClass::kOther);    // ZWJ (Cf)
  EXPECT_EQ(cp_class(0x0301), CpClass::kOther);    // combining acute (Mn)
  EXPECT_EQ(cp_class(0x1F600), CpClass::kOther);   // 😀
  EXPECT_EQ(cp_class(0x2EBF0), CpClass::kLetter);  // CJK Ext I (Unicode 15.1)
  EXPECT_EQ(cp_class(0x10FFFF), CpClass::kOther);
}

TEST(Unicode, RangesAreSortedAndDisjoint) {
  ASSERT_GT(kNumLetterNumberRanges, 100u);
  for (size_t i = 0; i < kNumLetterNumberRanges; ++i) {
    EXPECT_LE(kLetterNumberRanges[i].first, kLetterNumberRanges[i].last);
    if (i > 0) {
      EXPECT_LT(kLetterNumberRanges[i - 1].last, kLetterNumberRanges[i].first);
    }
  }
}

TEST(Unicode, LenientDecodingMatchesLlamaCpp) {
  EXPECT_EQ(decode_utf8_lenient("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(decode_utf8_lenient("\xF0\x9F\x98\x80"), (std::vector<uint32_t>{0x1F600}));
  // Stray continuation byte, truncated sequences: U+FFFD per byte consumed.
  EXPECT_EQ(decode_utf8_lenient("\x80x"), (std::vector<uint32_t>{kReplacementChar, 'x'}));
  EXPECT_EQ(decode_utf8_lenient("\xE6\x97"),
            (std::vector<uint32_t>{kReplacementChar, kReplacementChar}));
  // Overlong and surrogate forms are accepted as they decode.
  EXPECT_EQ(decode_utf8_lenient(std::string_view("\xC0\x80", 2)), (std::vector<uint32_t>{0}));
  EXPECT_EQ(decode_utf8_lenient("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  // Beyond U+10FFFF.
  EXPECT_EQ(decode_utf8_lenient("\xF5\x80\x80\x80"), (std::vector<uint32_t>{kReplacementChar}));
  EXPECT_EQ(decode_utf8_lenient("\xFF"), (std::vector<uint32_t>{kReplacementChar}));
}

TEST(Unicode, EncodeRoundTrips) {
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(&s, cp);
    EXPECT_EQ(decode_utf8_lenient(s), std::vector<uint32_t>{cp}) << cp;
    EXPECT_TRUE(is_valid_utf8(s)) << cp;
  }
}

TEST(Unicode, SequenceStatus) {
  EXPECT_EQ(utf8_sequence_status("a", 0), 1);
  EXPECT_EQ(utf8_sequence_status("\xC3\xA9", 0), 2);
  EXPECT_EQ(utf8_sequence_status("\xF0\x9F\x98\x80", 0), 4);
  EXPECT_EQ(utf8_sequence_status("\xF0\x9F\x98", 0), 0);  // may still complete
  EXPECT_EQ(utf8_sequence_status("\xC3", 0), 0);
  EXPECT_EQ(utf8_sequence_status("\x80", 0), -1);
  EXPECT_EQ(utf8_sequence_status("\xC0\x80", 0), -1);          // overlong
  EXPECT_EQ(utf8_sequence_status("\xED\xA0\x80", 0), -1);      // surrogate
  EXPECT_EQ(utf8_sequence_status("\xF4\x90\x80\x80", 0), -1);  // > U+10FFFF
  EXPECT_EQ(utf8_sequence_status("\xC3x", 0), -1);
  EXPECT_TRUE(is_valid_utf8("héllo 世界 😀"));
  EXPECT_FALSE(is_valid_utf8("h\xC3"));
}

TEST(ByteLevel, AlphabetIsABijection) {
  EXPECT_EQ(byte_level::byte_to_cp(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_level::byte_to_cp('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_level::byte_to_cp('A'), uint32_t('A'));
  EXPECT_EQ(byte_level::byte_to_cp(0xAD), 0x143u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level::cp_to_byte(byte_level::byte_to_cp(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(byte_level::cp_to_byte(0x20), -1);  // ' ' is not in the alphabet
  EXPECT_EQ(byte_level::cp_to_byte(0x4E2D), -1);
}

}  // namespace
}  // namespace omnibus::unicode
