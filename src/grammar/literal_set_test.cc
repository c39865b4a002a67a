// literal_set_ebnf() and the compilers that use it (choice, JSON Schema
// enum): the factored grammar accepts exactly the set, and sets far beyond
// the matcher's stack bound (issue 34: 5,000 choices or enum values used to
// answer "" with finish_reason "stop") compile and work.
#include "grammar/literal_set.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "grammar/compiler_test_util.h"
#include "grammar/json_schema.h"
#include "grammar/structured_output.h"

namespace omnibus::grammar {
namespace {

std::string grammar_of(const std::vector<std::string>& set) {
  const LiteralSetEbnf e = literal_set_ebnf(set, [](size_t i) { return fmt::format("h{}", i); });
  std::string text = "root ::= " + e.body + "\n";
  for (size_t i = 0; i < e.rules.size(); ++i) text += fmt::format("h{} ::= {}\n", i, e.rules[i]);
  return text;
}

TEST(LiteralSet, FactorsCommonPrefixes) {
  EXPECT_EQ(grammar_of({"red", "rose", "blue", "red"}),
            "root ::= \"blue\" | \"r\" h0\n"
            "h0 ::= \"ed\" | \"ose\"\n");
  EXPECT_EQ(grammar_of({"ab", "a", ""}),
            "root ::= \"\" | \"a\" h0\n"
            "h0 ::= \"\" | \"b\"\n");
  // Branches fall on code points, never inside one: é and è share a lead byte.
  EXPECT_EQ(grammar_of({"\xC3\xA9t\xC3\xA9", "\xC3\xA8re"}),
            "root ::= \"\\u00E8re\" | \"\\u00E9t\\u00E9\"\n");
  EXPECT_EQ(grammar_of({"a\"b", "a\\"}), "root ::= \"a\" h0\nh0 ::= \"\\\"b\" | \"\\\\\"\n");
}

TEST(LiteralSet, AcceptsExactlyTheSet) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "b", "c", "\xC3\xA9", "\xC3\xA8", "\xE2\x82\xAC", "\""};
  auto word = [&](size_t max_len) {
    std::string w;
    for (size_t n = rng() % (max_len + 1); n > 0; --n) w += alphabet[rng() % std::size(alphabet)];
    return w;
  };
  for (int round = 0; round < 40; ++round) {
    std::set<std::string> set;
    for (size_t n = 1 + rng() % 30; set.size() < n;) set.insert(word(6));
    const testing::Acceptor a(grammar_of({set.begin(), set.end()}));
    ASSERT_TRUE(a.ok());
    for (const std::string& s : set) EXPECT_TRUE(a.accepts(s)) << s;
    for (int k = 0; k < 200; ++k) {
      const std::string w = word(7);
      EXPECT_EQ(a.accepts(w), set.count(w) == 1) << w;
    }
  }
}

// Issue 34: 5,000 choices used to exceed the matcher's 4,096 stacks at the
// start; the output was "" with finish_reason "stop".
TEST(LiteralSet, FiveThousandChoicesWork) {
  StructuredOutput so;
  so.kind = StructuredOutput::Kind::kChoice;
  for (int i = 0; i < 5000; ++i) so.choices.push_back(fmt::format("item-{}", i));
  StatusOr<std::string> ebnf = to_ebnf(so);
  ASSERT_TRUE(ebnf.is_ok());
  const testing::Acceptor a(*ebnf);
  ASSERT_TRUE(a.ok());
  for (const char* s : {"item-0", "item-4999", "item-123", "item-50"})
    EXPECT_TRUE(a.accepts(s)) << s;
  EXPECT_FALSE(a.accepts("item-5000"));
  EXPECT_FALSE(a.accepts("item-"));
}

TEST(LiteralSet, FiveThousandIntegerEnumValuesWork) {
  std::string schema = R"({"type": "integer", "enum": [)";
  for (int i = 0; i < 5000; ++i) schema += fmt::format("{}{}", i ? "," : "", i * 7 - 300);
  schema += "]}";
  StatusOr<std::string> ebnf = json_schema_to_ebnf(schema);
  ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().to_string();
  const testing::Acceptor a(*ebnf);
  ASSERT_TRUE(a.ok());
  for (const char* s : {"-300", "-6", "1", "8", "34693"}) EXPECT_TRUE(a.accepts(s)) << s;
  for (const char* s : {"-301", "0", "2", "34692", "-"}) EXPECT_FALSE(a.accepts(s)) << s;
}

// {"$ref": "#"} and an a <-> b cycle compile to rules that only refer to each
// other: refused when the grammar is parsed (they used to give "" with "stop").
TEST(LiteralSet, SchemaRefCyclesWithNoTextAreRefused) {
  for (
      const char* schema :
      {R"({"$ref": "#"})",
       R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
       R"({"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]})"}) {
    SCOPED_TRACE(schema);
    StatusOr<std::string> ebnf = json_schema_to_ebnf(schema);
    ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().to_string();
    auto g = parse_ebnf(*ebnf);
    ASSERT_FALSE(g.is_ok());
    EXPECT_NE(g.status().message().find("matches no text"), std::string::npos)
        << g.status().message();
  }
  // Recursion with a way out still works.
  StatusOr<std::string> ok =
      json_schema_to_ebnf(R"({"type": "object", "properties": {"x": {"$ref": "#"}}})");
  ASSERT_TRUE(ok.is_ok());
  const testing::Acceptor a(*ok);
  EXPECT_TRUE(a.accepts(R"({"x":{"x":{}}})"));
}

}  // namespace
}  // namespace omnibus::grammar
