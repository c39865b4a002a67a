// regex_to_ebnf: golden EBNF for small patterns, and the errors (with
// offsets) for what is unsupported or too large.
#include "grammar/regex.h"

#include <gtest/gtest.h>

#include "grammar/compiler_test_util.h"
#include "grammar/regex_parser.h"

namespace omnibus::grammar {
namespace {

std::string item(std::string_view pattern) {
  std::string extra;
  auto r = regex_to_ebnf_item(pattern, "", &extra);
  EXPECT_TRUE(r.is_ok()) << pattern << ": " << r.status().to_string();
  return r.is_ok() ? *r : "";
}

std::string error_of(std::string_view pattern) {
  auto r = regex_to_ebnf(pattern);
  EXPECT_FALSE(r.is_ok()) << pattern << " compiled to " << (r.is_ok() ? *r : "");
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(RegexToEbnf, Literals) {
  EXPECT_EQ(item("abc"), "\"abc\"");
  EXPECT_EQ(item("^abc$"), "\"abc\"");
  EXPECT_EQ(item(""), "\"\"");
  EXPECT_EQ(item("a\"b\\\\"), "\"a\\\"b\\\\\"");
  EXPECT_EQ(item("\\n\\t\\x41\\u00e9"), "\"\\n\\tA\\u00E9\"");
  EXPECT_EQ(item("é"), "\"\\u00E9\"");
  EXPECT_EQ(item("\\.\\*\\(\\["), "\".*([\"");
  EXPECT_EQ(item("a{"), "\"a{\"");
}

TEST(RegexToEbnf, Root) {
  auto r = regex_to_ebnf("ab|c", "p-");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "p-root ::= ( \"ab\" | \"c\" )\n");
  EXPECT_FALSE(regex_to_ebnf("a", "bad prefix").is_ok());
}

TEST(RegexToEbnf, Classes) {
  EXPECT_EQ(item("[a-z]"), "[a-z]");
  EXPECT_EQ(item("[abc]"), "[a-c]");
  EXPECT_EQ(item("[ac]"), "[ac]");
  EXPECT_EQ(item("\\d"), "[0-9]");
  EXPECT_EQ(item("[\\d_]"), "[0-9_]");
  EXPECT_EQ(item("\\w"), "[0-9A-Z_a-z]");
  EXPECT_EQ(item("[^a]"), "[^a]");
  EXPECT_EQ(item("."), "[^\\n]");
  EXPECT_EQ(item("[\\]\\-\\^\\[\"]"), "[\\\"\\-\\[\\]\\^]");
  EXPECT_EQ(item("[-a]"), "[\\-a]");
  EXPECT_EQ(item("[a-]"), "[\\-a]");
  EXPECT_EQ(item("[]a]"), "[\\]a]");
  EXPECT_EQ(item("\\D"), "[^0-9]");
  EXPECT_EQ(item("[^\\D]"), "[0-9]");
  EXPECT_EQ(item("[\\b]"), "\"\\x08\"");
}

TEST(RegexToEbnf, Quantifiers) {
  EXPECT_EQ(item("ab*"), "( \"a\" \"b\"* )");
  EXPECT_EQ(item("(ab)+"), "\"ab\"+");
  EXPECT_EQ(item("a?"), "\"a\"?");
  EXPECT_EQ(item("a{3}"), "\"a\"{3}");
  EXPECT_EQ(item("a{2,}"), "\"a\"{2,}");
  EXPECT_EQ(item("a{2,5}"), "\"a\"{2,5}");
  EXPECT_EQ(item("a{,5}"), "\"a\"{0,5}");
  EXPECT_EQ(item("a*?b+?"), "( \"a\"* \"b\"+ )");
  EXPECT_EQ(item("(?:a|bc)d"), "( ( \"a\" | \"bc\" ) \"d\" )");
  EXPECT_EQ(item("(?P<x>a)(?<y>b)"), "\"ab\"");
  EXPECT_EQ(item("a{0}"), "\"\"");
  EXPECT_EQ(item("(a|)"), "( \"a\" | \"\" )");
}

TEST(RegexToEbnf, Unsupported) {
  EXPECT_EQ(error_of("a(?=b)"), "regex: lookaround is unsupported at offset 1");
  EXPECT_EQ(error_of("(a)\\1"), "regex: backreferences are unsupported at offset 3");
  EXPECT_EQ(error_of("a\\bc"), "regex: \\b (word boundary) is unsupported at offset 1");
  EXPECT_EQ(error_of("(?i)a"), "regex: inline flags and (? extensions are unsupported at offset 0");
  EXPECT_EQ(error_of("a*+"), "regex: possessive quantifiers are unsupported at offset 2");
  EXPECT_EQ(error_of("a**"), "regex: multiple repeat at offset 2");
  EXPECT_EQ(error_of("*a"), "regex: nothing to repeat at offset 0");
  EXPECT_EQ(error_of("(a"), "regex: missing ')' at offset 2");
  EXPECT_EQ(error_of("a)"), "regex: unmatched ')' at offset 1");
  EXPECT_EQ(error_of("[a"), "regex: unterminated character class at offset 0");
  EXPECT_EQ(error_of("a^"), "regex: '^' is supported only at the start at offset 1");
  EXPECT_EQ(error_of("a$b"), "regex: '$' is supported only at the end at offset 1");
  EXPECT_EQ(error_of("[z-a]"), "regex: character range out of order at offset 4");
  EXPECT_EQ(error_of("a{1001}"), "regex: repetition count above 1000 at offset 7");
  EXPECT_EQ(error_of("\\"), "regex: trailing backslash at offset 1");
  EXPECT_EQ(error_of("\xff"), "regex: invalid UTF-8 at offset 0");
}

TEST(RegexToEbnf, SizeIsBounded) {
  EXPECT_NE(error_of("((a{1000}){1000}){1000}").find("pattern too large"), std::string::npos);
  EXPECT_NE(error_of("(a{101}){1000}").find("pattern too large"), std::string::npos);
  EXPECT_EQ(item("(a{10}){100}"), "( \"a\"{10} ){100}");
  EXPECT_EQ(item("(a{100}){1000}"), "( \"a\"{100} ){1000}");  // exactly 1e5 items
  std::string deep(200, '(');
  EXPECT_NE(error_of(deep).find("nested too deeply"), std::string::npos);
}

TEST(RegexToEbnf, JsonStringContent) {
  internal::RegexOptions json;
  json.json_string_content = true;
  auto lit = internal::regex_item("a\"\\\\\\n", json);
  ASSERT_TRUE(lit.is_ok());
  // JSON text a\"\\\n, quoted for EBNF.
  EXPECT_EQ(*lit, "\"a\\\\\\\"\\\\\\\\\\\\n\"");
  auto dot = internal::regex_item(".", json);
  ASSERT_TRUE(dot.is_ok());
  EXPECT_EQ(*dot, "[^\\x00-\\x1F\\\"\\\\]");
  EXPECT_FALSE(internal::regex_item("[\\n\"]", json).is_ok());
}

struct Case {
  const char* pattern;
  std::vector<const char*> match;
  std::vector<const char*> no_match;
};

TEST(RegexAcceptance, FullMatchThroughMatcher) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"^a|b$", {"a", "b"}, {"ab", ""}},
      {"[a-c]+x?", {"a", "abcx", "cc"}, {"x", "abd", ""}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234"}},
      {"(ab|cd){2,3}", {"abab", "abcdab"}, {"ab", "abababab"}},
      {"colou?r", {"color", "colour"}, {"colouur"}},
      {"[^0-9]*", {"", "abc", "\xc3\xa9"}, {"a1"}},
      {".", {"x", "\xe2\x82\xac"}, {"\n", "xy"}},
      {"\\w+@\\w+\\.com", {"a_1@b.com"}, {"a@b.org"}},
      {"\\s*", {"", " \t\n"}, {"a"}},
      {"[\\-+]?\\d+(\\.\\d+)?", {"-1.5", "+3", "42"}, {"1.", "--1"}},
      {"(?:yes|no)", {"yes", "no"}, {"yesno"}},
      {"a{2}b{0,2}", {"aa", "aab", "aabb"}, {"a", "aabbb"}},
      {"x*?y+?", {"y", "xxyy"}, {"x"}},
      {"\\u00e9\\x41",
       {"\xc3\xa9"
        "A"},
       {"eA"}},
      {"[\\]\\[]", {"]", "["}, {"\\\\"}},
      {"\"q\"", {"\"q\""}, {"q"}},
      {"(a|)b", {"ab", "b"}, {"a"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern);
    auto ebnf = regex_to_ebnf(c.pattern, "r-");
    ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().to_string();
    testing::Acceptor a("root ::= r-root\n" + *ebnf);
    ASSERT_TRUE(a.ok());
    for (const char* m : c.match)
      EXPECT_TRUE(a.accepts(m)) << "should match " << m << "\n" << *ebnf;
    for (const char* m : c.no_match)
      EXPECT_FALSE(a.accepts(m)) << "should not match " << m << "\n" << *ebnf;
  }
}

}  // namespace
}  // namespace omnibus::grammar
