#include "grammar/grammar_matcher.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "grammar/test_grammars.h"

namespace omnibus::grammar {
namespace {

std::shared_ptr<const Grammar> parse(std::string_view text) {
  auto g = parse_ebnf(text);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : nullptr;
}

// Whole string accepted and the root may end there.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view s) {
  GrammarMatcher m(g);
  return m.accept_bytes(s) && m.can_end();
}

TEST(GrammarMatcher, LiteralsAndAlternatives) {
  auto g = parse("root ::= \"ab\" | \"ac\" | \"a\"");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "ac"));
  EXPECT_TRUE(matches(g, "a"));
  EXPECT_FALSE(matches(g, "ad"));
  EXPECT_FALSE(matches(g, "abc"));
  EXPECT_FALSE(matches(g, ""));
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  EXPECT_EQ(m.next_bytes().count(), 1u);
  EXPECT_TRUE(m.next_bytes()['a']);
  ASSERT_TRUE(m.accept_byte('a'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_complete());
  const std::string before = m.state_key();
  EXPECT_FALSE(m.accept_byte('z'));
  EXPECT_EQ(m.state_key(), before);  // unchanged on reject
  ASSERT_TRUE(m.accept_byte('b'));
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.next_bytes().none());
}

TEST(GrammarMatcher, AcceptBytesIsAllOrNothing) {
  auto g = parse("root ::= \"abc\"");
  GrammarMatcher m(g);
  const std::string k0 = m.state_key();
  EXPECT_FALSE(m.accept_bytes("abd"));
  EXPECT_EQ(m.state_key(), k0);
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.is_complete());
}

TEST(GrammarMatcher, Utf8ClassesAndDot) {
  auto g = parse("root ::= [a-zé€-€😀-😂]+");
  EXPECT_TRUE(matches(g, "abc"));
  EXPECT_TRUE(matches(g, "h\xc3\xa9"));          // é
  EXPECT_TRUE(matches(g, "\xe2\x82\xac"));       // €
  EXPECT_TRUE(matches(g, "\xf0\x9f\x98\x81z"));  // 😁
  EXPECT_FALSE(matches(g, "\xf0\x9f\x98\x83"));  // 😃 outside
  EXPECT_FALSE(matches(g, "\xc3\xa8"));          // è
  EXPECT_FALSE(matches(g, "\xc3"));              // truncated
  auto dot = parse("root ::= .*");
  EXPECT_TRUE(matches(dot, "any \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(matches(dot, std::string("\x00", 1)));
  EXPECT_FALSE(matches(dot, "\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(matches(dot, "\xc0\x80"));          // overlong
  EXPECT_FALSE(matches(dot, "\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(matches(dot, "\xff"));
  EXPECT_FALSE(matches(dot, "\x80"));
  auto neg = parse("root ::= [^a\\u00e9]");
  EXPECT_TRUE(matches(neg, "b"));
  EXPECT_TRUE(matches(neg, "\xc3\xa8"));
  EXPECT_FALSE(matches(neg, "a"));
  EXPECT_FALSE(matches(neg, "\xc3\xa9"));
  auto lit = parse("root ::= \"\\xe9\\u20AC\"");  // \xHH is a code point
  EXPECT_TRUE(matches(lit, "\xc3\xa9\xe2\x82\xac"));
}

TEST(GrammarMatcher, Utf8ClassBoundariesExhaustive) {
  // every code point in and around the boundaries of the UTF-8 lengths
  auto g = parse("root ::= [\\u0080-\\u07FF\\U00010000-\\U0010FFFF]");
  auto in = [](uint32_t c) { return (c >= 0x80 && c <= 0x7FF) || (c >= 0x10000 && c <= 0x10FFFF); };
  for (uint32_t c :
       {0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x3FFFFu, 0x40000u, 0xFFFFFu, 0x10FFFFu}) {
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      s = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    } else if (c < 0x10000) {
      s = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
           static_cast<char>(0x80 | (c & 0x3F))};
    } else {
      s = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
           static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    EXPECT_EQ(matches(g, s), in(c)) << std::hex << c;
  }
}

TEST(GrammarMatcher, RepetitionBounds) {
  auto g = parse("root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,} \"d\"{0,2}");
  EXPECT_FALSE(matches(g, "abbbc"));
  EXPECT_TRUE(matches(g, "aabbbc"));
  EXPECT_TRUE(matches(g, "aaaabbbcccdd"));
  EXPECT_FALSE(matches(g, "aaaaabbbc"));
  EXPECT_FALSE(matches(g, "aabbc"));
  EXPECT_FALSE(matches(g, "aabbbbc"));
  EXPECT_FALSE(matches(g, "aabbb"));
  EXPECT_FALSE(matches(g, "aabbbcddd"));
  auto star = parse("root ::= \"x\"* \"y\"+ \"z\"?");
  EXPECT_TRUE(matches(star, "y"));
  EXPECT_TRUE(matches(star, "xxxyyz"));
  EXPECT_FALSE(matches(star, "xz"));
  EXPECT_FALSE(matches(star, "yzz"));
  auto exact0 = parse("root ::= \"a\"{0} \"b\"");
  EXPECT_TRUE(matches(exact0, "b"));
  EXPECT_FALSE(matches(exact0, "ab"));
}

TEST(GrammarMatcher, NullableAndEpsilonLoops) {
  auto g = parse("root ::= ((\"a\"?)*)* (e e)* \"b\"\ne ::= \"\" | \"c\"?");
  EXPECT_TRUE(matches(g, "b"));
  EXPECT_TRUE(matches(g, "aaab"));
  EXPECT_TRUE(matches(g, "aaccb"));
  EXPECT_FALSE(matches(g, "acab"));
  EXPECT_FALSE(matches(g, "ba"));
  auto empty = parse("root ::= \"\" | e\ne ::= \"\"");
  GrammarMatcher m(empty);
  EXPECT_TRUE(m.is_complete());
  EXPECT_TRUE(m.can_end());
  auto tail = parse("root ::= root | \"x\"");  // an epsilon loop in last position
  EXPECT_TRUE(matches(tail, "x"));
}

TEST(GrammarMatcher, JsonGrammar) {
  auto g = parse(testing::kJsonGbnf);
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_TRUE(
      matches(g, R"({"a": [1, 2.5, -3e5, true, null, {"b": "c\n\u00e9"}], "d": "h\u00e9"})"));
  EXPECT_TRUE(matches(g, "{\"k\": \"\xc3\xa9\xf0\x9f\x98\x80\"}"));
  EXPECT_FALSE(matches(g, "{\"a\" 1}"));
  EXPECT_FALSE(matches(g, "[1]"));  // root is an object
  EXPECT_FALSE(matches(g, "{\"a\": 01}"));
  EXPECT_FALSE(matches(g, "{\"a\": \"\x01\"}"));
  EXPECT_FALSE(matches(g, "{\"a\": tru}"));
}

TEST(GrammarMatcher, StateKeyIsCanonical) {
  auto g = parse(testing::kJsonGbnf);
  GrammarMatcher a(g), b(g);
  ASSERT_TRUE(a.accept_bytes(R"({"x": [1, {"y": "abc)"));
  ASSERT_TRUE(b.accept_bytes(R"({"long key": [22, {"z": "q)"));
  EXPECT_EQ(a.state_key(), b.state_key());
  GrammarMatcher c(g);
  ASSERT_TRUE(c.accept_bytes(R"({"x": [1, "abc)"));
  EXPECT_NE(a.state_key(), c.state_key());  // one array level less
  // a matcher built one byte at a time and one by accept_bytes agree
  GrammarMatcher d(g), e(g);
  const std::string s = R"({"a": {"b": [true, false]}, "c": 1.5})";
  for (char ch : s) ASSERT_TRUE(d.accept_byte(static_cast<uint8_t>(ch)));
  ASSERT_TRUE(e.accept_bytes(s));
  EXPECT_EQ(d.state_key(), e.state_key());
  EXPECT_TRUE(d.can_end());
  // two separately parsed copies of a grammar give the same keys
  auto g2 = parse(testing::kJsonGbnf);
  GrammarMatcher f(g2);
  ASSERT_TRUE(f.accept_bytes(s));
  EXPECT_EQ(f.state_key(), d.state_key());
}

TEST(GrammarMatcher, CopiesAreIndependent) {
  auto g = parse("root ::= \"a\" (\"b\" | \"c\")");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_byte('a'));
  GrammarMatcher copy = m;
  ASSERT_TRUE(copy.accept_byte('b'));
  EXPECT_TRUE(copy.is_complete());
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accept_byte('c'));
}

TEST(GrammarMatcher, AmbiguityBeyondMaxStacksFails) {
  // after n "x" there are 3 * 2^n distinct stacks: 2^n strings of pending
  // y/z, each with three tops (either "x" of s, or the next pending byte)
  auto g = parse("root ::= s\ns ::= \"x\" s \"y\" | \"x\" s \"z\" | \"\"");
  GrammarMatcher m(g);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(m.accept_byte('x')) << i;  // 3072 stacks: still fine
  EXPECT_FALSE(m.failed());
  GrammarMatcher ok = m;
  EXPECT_TRUE(ok.accept_bytes("yzyzyzyzyz"));
  EXPECT_TRUE(ok.is_complete());
  EXPECT_FALSE(m.accept_byte('x'));  // 6144 stacks
  EXPECT_TRUE(m.failed());
  EXPECT_FALSE(m.accept_byte('y'));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.next_bytes().none());
  EXPECT_EQ(m.state_key(), "failed");
}

TEST(GrammarMatcher, ConcurrentMatchersShareClosures) {
  auto g = parse(testing::kJsonGbnf);  // fresh: closures are computed by the racing threads
  const std::string doc = R"({"a": [1, {"b": "cé"}, null], "d": -2.5e3})";
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  std::vector<std::string> keys(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      GrammarMatcher m(g);
      for (char c : doc) {
        if (!m.accept_byte(static_cast<uint8_t>(c))) ++bad;
      }
      if (!m.can_end()) ++bad;
      keys[t] = m.state_key();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(keys[t], keys[0]);
}

TEST(GrammarMatcher, HandBuiltGrammar) {
  auto g = std::make_shared<Grammar>();
  Element a;
  a.bytes.set('a');
  g->rules.push_back(Rule{"root", {{a, a}}});
  g->root = 0;
  GrammarMatcher m(g);
  EXPECT_TRUE(m.accept_bytes("aa"));
  EXPECT_TRUE(m.is_complete());
}

}  // namespace
}  // namespace omnibus::grammar

namespace omnibus::grammar {
namespace {

// 2^200 ways to expand the start without reading a byte: the closure gives
// up at its bounds and the matcher reports failed() instead of hanging.
// parse_ebnf refuses such a grammar (its start fails), so it is built by hand.
TEST(GrammarMatcher, ExplodingClosureFails) {
  auto g = std::make_shared<Grammar>();
  auto ref = [](int32_t r) {
    Element e;
    e.kind = Element::Kind::kRule;
    e.rule = r;
    return e;
  };
  auto byte = [](char c) {
    Element e;
    e.bytes.set(static_cast<uint8_t>(c));
    return e;
  };
  g->rules.push_back(Rule{"root", {{ref(1)}}});
  for (int32_t i = 0; i < 200; ++i) {
    g->rules.push_back(
        Rule{fmt::format("r{}", i), {{ref(i + 2), byte('a')}, {ref(i + 2), byte('b')}}});
  }
  g->rules.push_back(Rule{"r200", {{byte('x')}}});
  g->root = 0;
  GrammarMatcher m(g);
  EXPECT_TRUE(m.failed());
  EXPECT_FALSE(m.accept_byte('x'));
}

}  // namespace
}  // namespace omnibus::grammar

namespace omnibus::grammar {
namespace {

std::string utf8_of(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    s = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
  } else if (c < 0x10000) {
    s = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
         static_cast<char>(0x80 | (c & 0x3F))};
  } else {
    s = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
         static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
  }
  return s;
}

// The UTF-8 range split against a direct membership test, over every code
// point of the BMP and every 13th above it (surrogates never match).
TEST(GrammarMatcher, Utf8SplitAgreesWithMembership) {
  auto g = parse("root ::= [^\\x00-\\x1F\"\\u00e9-\\u0800\\uFFFE\\U00012345-\\U000FFFFF]");
  auto in = [](uint32_t c) {
    if (c >= 0xD800 && c <= 0xDFFF) return false;
    return !(c <= 0x1F || c == '"' || (c >= 0xE9 && c <= 0x800) || c == 0xFFFE ||
             (c >= 0x12345 && c <= 0xFFFFF));
  };
  GrammarMatcher start(g);
  int checked = 0;
  for (uint32_t c = 0; c <= 0x10FFFF; c += (c < 0x10000 ? 1 : 13)) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;  // not encodable as valid UTF-8
    GrammarMatcher m = start;
    const bool got = m.accept_bytes(utf8_of(c)) && m.is_complete();
    ASSERT_EQ(got, in(c)) << std::hex << c;
    ++checked;
  }
  EXPECT_GT(checked, 140000);
}

}  // namespace
}  // namespace omnibus::grammar
