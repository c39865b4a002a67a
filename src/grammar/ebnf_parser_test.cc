#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "grammar/test_grammars.h"

namespace omnibus::grammar {
namespace {

std::string parse_error(std::string_view text, const GrammarLimits& limits = {}) {
  auto g = parse_ebnf(text, limits);
  if (g.is_ok()) return "OK";
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  return g.status().message();
}

TEST(EbnfParser, ParsesSimpleGrammar) {
  auto g = parse_ebnf("root ::= \"a\" b | [x-z]\nb ::= \"bc\"\n");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const Grammar& gr = **g;
  ASSERT_GE(gr.root, 0);
  EXPECT_EQ(gr.rules[gr.root].name, "root");
  ASSERT_EQ(gr.rules[gr.root].alternatives.size(), 2u);
  EXPECT_EQ(gr.rules[gr.root].alternatives[0].size(), 2u);
  EXPECT_EQ(gr.rules[gr.root].alternatives[0][1].kind, Element::Kind::kRule);
  const Element& cls = gr.rules[gr.root].alternatives[1][0];
  EXPECT_EQ(cls.kind, Element::Kind::kBytes);
  EXPECT_EQ(cls.bytes.count(), 3u);
}

TEST(EbnfParser, ParsesLlamaCppJsonGrammar) {
  auto g = parse_ebnf(testing::kJsonGbnf);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
}

TEST(EbnfParser, CommentsContinuationAndEscapes) {
  const char* text =
      "# leading comment\n"
      "root ::= ( \"a\" # inside a group\n"
      "   | \"\\x41\\u00e9\\U0001F600\\n\\t\\\\\\\"\" ) |\n"
      "  [\\]\\[\\-\\^] item\n"
      "\n"
      "item ::= \"'\" [^\\n]\n";
  auto g = parse_ebnf(text);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
}

TEST(EbnfParser, Repetitions) {
  for (const char* text :
       {"root ::= \"a\"*", "root ::= \"ab\"+", "root ::= [a]?", "root ::= \"a\"{3}",
        "root ::= \"a\"{2,}", "root ::= \"a\"{2,5}", "root ::= (\"a\" | \"b\"){0,1000}",
        "root ::= ((\"a\"?)*)*", "root ::= \"x\"{ 1 , 2 }"}) {
    auto g = parse_ebnf(text);
    EXPECT_TRUE(g.is_ok()) << text << ": " << g.status().to_string();
  }
}

TEST(EbnfParser, BoundedRepetitionIsLinear) {
  // Nested nullable repetitions: linear in size, but their start is so
  // ambiguous that no matcher could hold it: refused, quickly.
  EXPECT_NE(parse_error("root ::= ((\"ab\"{0,1000}){0,1000}){0,1000}").find("too ambiguous"),
            std::string::npos);
  auto g = parse_ebnf("root ::= (\"a\" (\"b\" \"c\"{0,1000}){0,1000}){0,1000}");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  size_t n = 0;
  for (const Rule& r : (*g)->rules) {
    for (const auto& alt : r.alternatives) n += alt.size();
  }
  EXPECT_LT(n, 20000u);
}

TEST(EbnfParser, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("root ::= \"a\"\nfoo = \"b\""),
            "grammar line 2:5: expected '::=' after rule name");
  EXPECT_EQ(parse_error("root ::= \"abc"), "grammar line 1:10: unterminated literal");
  EXPECT_EQ(parse_error("root ::= [abc"), "grammar line 1:10: unterminated character class");
  EXPECT_EQ(parse_error("root ::= ( \"a\" "), "grammar line 1:16: expected ')'");
  EXPECT_EQ(parse_error("root ::= \"a\" )"),
            "grammar line 1:14: unexpected ')': expected an item, '|' or end of line");
  EXPECT_EQ(parse_error("root ::= \"\\q\""), "grammar line 1:11: unknown escape '\\q'");
  EXPECT_EQ(parse_error("root ::= \"\\x4\""), "grammar line 1:14: expected 2 hex digits in escape");
  EXPECT_EQ(parse_error("root ::= \"\\uD800\""),
            "grammar line 1:11: surrogate code point in escape");
  EXPECT_EQ(parse_error("root ::= \"\\U00110000\""),
            "grammar line 1:11: code point beyond U+10FFFF");
  EXPECT_EQ(parse_error("root ::= [z-a]"), "grammar line 1:11: character range out of order");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,2}"), "grammar line 1:13: repetition {n,m} with m < n");
  EXPECT_EQ(parse_error("root ::= \"a\"{x}"), "grammar line 1:14: expected a number in repetition");
  EXPECT_EQ(parse_error("root ::= \"a\"{2"),
            "grammar line 1:15: expected '}' to close the repetition");
  EXPECT_EQ(parse_error("::= \"a\""), "grammar line 1:1: expected a rule name");
  EXPECT_EQ(parse_error(std::string("root ::= \"\xff\"")),
            "grammar line 1:11: invalid UTF-8 in grammar text");
  // a newline ends a rule; `|` at the start of the next line is not a continuation
  EXPECT_EQ(parse_error("root ::= \"a\"\n | \"b\""), "grammar line 2:2: expected a rule name");
}

TEST(EbnfParser, RuleErrors) {
  EXPECT_EQ(parse_error("root ::= foo"), "grammar line 1:10: undefined rule 'foo'");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""),
            "grammar line 2:1: duplicate rule 'root'");
  EXPECT_EQ(parse_error("start ::= \"a\""), "grammar line 1:14: no rule named 'root'");
  EXPECT_EQ(parse_error(""), "grammar line 1:1: no rule named 'root'");
}

TEST(EbnfParser, LeftRecursion) {
  EXPECT_EQ(parse_error("root ::= root \"a\" | \"b\""),
            "grammar line 1:1: rule 'root' is left-recursive");
  EXPECT_EQ(parse_error("root ::= a\na ::= b \"x\"\nb ::= a | \"y\""),
            "grammar line 2:1: rule 'a' is left-recursive");
  // through a nullable prefix
  EXPECT_EQ(parse_error("root ::= e root \"a\" | \"b\"\ne ::= \"\" | \"c\""),
            "grammar line 1:1: rule 'root' is left-recursive");
  EXPECT_EQ(parse_error("root ::= \"x\"? root \"a\" | \"b\""),
            "grammar line 1:1: rule 'root' is left-recursive");
  // right recursion and epsilon loops are fine
  EXPECT_EQ(parse_error("root ::= \"a\" root | \"\""), "OK");
  EXPECT_EQ(parse_error("root ::= (\"a\"?)* \"b\""), "OK");
}

// Issue 34: a grammar that matches nothing used to compile, and its output
// ended at once, empty, with finish_reason "stop".
TEST(EbnfParser, AGrammarThatMatchesNoTextIsRefused) {
  const std::string none = "the grammar matches no text";
  EXPECT_EQ(parse_error("root ::= root").rfind(none, 0), 0u);
  EXPECT_EQ(parse_error("root ::= a\na ::= b\nb ::= a").rfind(none, 0), 0u);
  EXPECT_EQ(parse_error("root ::= \"x\" root").rfind(none, 0), 0u);  // no way out
  EXPECT_EQ(parse_error("root ::= \"{\" a \"}\"\na ::= \"[\" a \"]\"").rfind(none, 0), 0u);
  // A cycle beside a way out is fine.
  EXPECT_EQ(parse_error("root ::= root | \"a\""), "OK");
  EXPECT_EQ(parse_error("root ::= \"x\" root | \"\""), "OK");
}

// An alternative that can never finish is dropped: the matcher does not
// accept a byte that leads into it (before, "a" was accepted and the output
// was stuck there).
TEST(EbnfParser, AlternativesThatCannotFinishAreDropped) {
  auto g = parse_ebnf("root ::= \"a\" dead | \"b\"\ndead ::= \"c\" dead");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  GrammarMatcher m(*g);
  EXPECT_FALSE(m.accept_byte('a'));
  EXPECT_EQ(m.next_bytes().count(), 1u);
  EXPECT_TRUE(m.accept_byte('b'));
  EXPECT_TRUE(m.is_complete());
}

// A start with more parse stacks than the matcher holds could never produce
// a byte: refused at compile time, naming the limit.
TEST(EbnfParser, AStartBeyondTheMatchersBoundsIsRefused) {
  auto alternation = [](int n) {
    std::string text = "root ::= \"x0\"";
    for (int i = 1; i < n; ++i) text += " | \"x" + std::to_string(i) + "\"";
    return text;
  };
  EXPECT_EQ(parse_error(alternation(4000)), "OK");
  const std::string e = parse_error(alternation(5000));
  EXPECT_NE(e.find("more than 4096 alternatives"), std::string::npos) << e;
}

TEST(EbnfParser, Limits) {
  GrammarLimits small;
  small.max_text_bytes = 10;
  EXPECT_EQ(parse_error("root ::= \"abcdef\"", small), "grammar text is 17 bytes, the limit is 10");
  EXPECT_EQ(parse_error("root ::= \"a\"{1001}"),
            "grammar line 1:14: repetition count above the limit of 1000");
  GrammarLimits few;
  few.max_elements = 100;
  EXPECT_EQ(parse_error("root ::= \"a\"{200}", few),
            "grammar line 1:13: grammar too large: more than 100 elements after expansion");
  std::string deep = "root ::= ";
  for (int i = 0; i < 1000; ++i) deep += "(";
  EXPECT_EQ(parse_error(deep).find("groups nested too deeply") != std::string::npos, true);
}

TEST(EbnfParser, LiteralQuotingRoundTrips) {
  for (std::string s : {std::string("plain"), std::string("q\"b\\s\n\t\r"), std::string("\x01\x7f"),
                        std::string("h\xc3\xa9 \xf0\x9f\x98\x80")}) {
    auto g = parse_ebnf("root ::= " + ebnf_literal(s));
    ASSERT_TRUE(g.is_ok()) << ebnf_literal(s) << ": " << g.status().to_string();
    GrammarMatcher m(*g);
    EXPECT_TRUE(m.accept_bytes(s)) << ebnf_literal(s);
    EXPECT_TRUE(m.is_complete());
  }
  EXPECT_EQ(ebnf_literal("a\xff"), "\"a\\uFFFD\"");
  EXPECT_TRUE(parse_ebnf("root ::= " + ebnf_literal("\xff\xfe\xc3")).is_ok());
}

}  // namespace
}  // namespace omnibus::grammar

namespace omnibus::grammar {
namespace {

// A deterministic mini-fuzz (the libFuzzer target is fuzz/ebnf_fuzz.cc):
// random edits of valid grammars must parse or fail with a message, and
// matchers on whatever parses must survive random bytes.
TEST(EbnfParser, SurvivesRandomEdits) {
  const std::string seeds[] = {testing::kJsonGbnf,
                               "root ::= (\"a\" | [b-d]+ x?){1,3} .\nx ::= \"é\"* \"\"",
                               "root ::= [^\\n]{0,5} (root2)?\nroot2 ::= \"\\u00e9\" | \"\\x41\""};
  const char tokens[] = "()[]{}|*+?.\"\\:=-^,0123456789 \n#abcxé";
  std::mt19937 rng(5);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = seeds[rng() % 3];
    const int edits = 1 + rng() % 4;
    for (int k = 0; k < edits && !s.empty(); ++k) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s.erase(at, 1 + rng() % 3);
          break;
        case 1:
          s.insert(at, 1, tokens[rng() % (sizeof(tokens) - 1)]);
          break;
        default:
          s[at] = static_cast<char>(rng() % 256);
          break;
      }
    }
    auto g = parse_ebnf(s);
    if (!g.is_ok()) {
      EXPECT_FALSE(g.status().message().empty());
      continue;
    }
    ++parsed;
    GrammarMatcher m(*g);
    for (int k = 0; k < 20; ++k) {
      const auto next = m.next_bytes();
      uint8_t b = static_cast<uint8_t>(rng() % 256);
      for (int tries = 0; tries < 256 && !next[b] && next.any(); ++tries)
        b = static_cast<uint8_t>(b + 1);
      if (!m.accept_byte(b)) break;
    }
  }
  EXPECT_GT(parsed, 100);
}

}  // namespace
}  // namespace omnibus::grammar
