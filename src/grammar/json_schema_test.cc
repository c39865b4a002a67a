// json_schema_to_ebnf: golden EBNF for tiny schemas, the errors for what is
// unsupported, and acceptance through the real matcher: valid instances are
// accepted, invalid ones rejected.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/compiler_test_util.h"
#include "grammar/json_schema_rules.h"

namespace omnibus::grammar {
namespace {

std::string compile(std::string_view schema, JsonSchemaOptions options = {}) {
  auto r = json_schema_to_ebnf(schema, options);
  EXPECT_TRUE(r.is_ok()) << schema << ": " << r.status().to_string();
  return r.is_ok() ? *r : "";
}

std::string error_of(std::string_view schema, JsonSchemaOptions options = {}) {
  auto r = json_schema_to_ebnf(schema, options);
  EXPECT_FALSE(r.is_ok()) << schema << " compiled to\n" << (r.is_ok() ? *r : "");
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(JsonSchemaToEbnf, GoldenPrimitives) {
  JsonSchemaOptions compact;
  compact.any_whitespace = false;
  EXPECT_EQ(compile(R"({"type":"boolean"})"),
            "root ::= boolean\nboolean ::= \"true\" | \"false\"\n");
  EXPECT_EQ(compile(R"({"const":{"a":[1,"x"]}})"), "root ::= \"{\\\"a\\\":[1,\\\"x\\\"]}\"\n");
  EXPECT_EQ(compile(R"({"enum":["a",1,null]})"), "root ::= \"\\\"a\\\"\" | \"1\" | \"null\"\n");
  EXPECT_EQ(compile(R"({"type":"string","minLength":2,"maxLength":5})", compact),
            "root ::= \"\\\"\" char{2,5} \"\\\"\"\n"
            "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n");
  EXPECT_EQ(compile(R"({"type":"string","pattern":"^a[0-9]+$"})"),
            "root ::= \"\\\"\" ( \"a\" [0-9]+ ) \"\\\"\"\n");
  EXPECT_EQ(
      compile(R"({"type":"array","items":{"type":"null"},"minItems":1,"maxItems":3})", compact),
      "root ::= \"[\" root-item ( \",\" root-item ){0,2} \"]\"\nnull ::= \"null\"\nroot-item ::= "
      "null\n");
}

TEST(JsonSchemaToEbnf, GoldenObject) {
  JsonSchemaOptions o;
  o.any_whitespace = false;
  o.strict = true;
  o.rule_prefix = "s-";
  EXPECT_EQ(compile(R"({"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"},
                        "c":{"type":"null"}},"required":["b"]})",
                    o),
            "s-root ::= \"{\" s-root-b-kv ( \",\" ( s-root-a-kv ( \",\" s-root-c-kv )? | "
            "s-root-c-kv ) )? \"}\"\n"
            "s-null ::= \"null\"\n"
            "s-root-a ::= s-null\n"
            "s-root-a-kv ::= \"\\\"a\\\"\" \":\" s-root-a\n"
            "s-root-b ::= s-null\n"
            "s-root-b-kv ::= \"\\\"b\\\"\" \":\" s-root-b\n"
            "s-root-c ::= s-null\n"
            "s-root-c-kv ::= \"\\\"c\\\"\" \":\" s-root-c\n");
}

TEST(JsonSchemaToEbnf, IntegerRanges) {
  using internal::integer_range_body;
  EXPECT_EQ(*integer_range_body(0, 9), "[0-9]");
  EXPECT_EQ(*integer_range_body(5, 120),
            "[5-9] | [1-9] [0-9] | \"1\" ( [0-1] [0-9] | \"2\" \"0\" )");
  EXPECT_EQ(*integer_range_body(-3, -1), "\"-\" ( [1-3] )");
  EXPECT_FALSE(integer_range_body(3, 2).is_ok());
}

TEST(JsonSchemaToEbnf, Unsupported) {
  EXPECT_EQ(error_of(R"({"properties":{"a":{"not":{}}}})"),
            "unsupported keyword 'not' at /properties/a");
  EXPECT_EQ(error_of(R"({"type":"object","patternProperties":{}})"),
            "unsupported keyword 'patternProperties' at /");
  EXPECT_EQ(error_of(R"({"items":[{"uniqueItems":true}]})"),
            "unsupported keyword 'uniqueItems' at /items/0");
  EXPECT_NE(error_of(R"({"type":"string","format":"hostname"})").find("unsupported format"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"http://x/y"})").find("unsupported $ref"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("not found"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"number","minimum":0.5})").find("number bounds"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"number","exclusiveMaximum":3})").find("exclusive"),
            std::string::npos);
  EXPECT_NE(error_of(R"J({"type":"string","pattern":"(?=a)"})J").find("lookaround"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"array","maxItems":5000})").find("above 1000"), std::string::npos);
  EXPECT_NE(error_of(R"({"required":["x"],"additionalProperties":false})")
                .find("required but not allowed"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          R"({"allOf":[{"properties":{"a":{}}},{"properties":{"b":{}}}],"additionalProperties":false})")
          .find("excludes 'a'"),
      std::string::npos);
  EXPECT_NE(error_of("{").find("json schema:"), std::string::npos);
  EXPECT_NE(error_of("false").find("matches nothing"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"strin"})").find("unknown type"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","minimum":"x"})").find("must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","minimum":1e30})").find("1e18"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"integer","minimum":5,"maximum":2})").find("empty"),
            std::string::npos);
}

TEST(JsonSchemaToEbnf, Limits) {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 100; ++i) deep += "}";
  EXPECT_NE(error_of(deep).find("max_depth"), std::string::npos);
  JsonSchemaOptions small;
  small.max_output_bytes = 100;
  EXPECT_NE(
      error_of(R"({"type":"object","properties":{"aaaaaaaa":{"type":"string"},"bbbbbbbbb":{}}})",
               small)
          .find("max_output_bytes"),
      std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '[')).find("nested deeper"), std::string::npos);
}

TEST(JsonObjectEbnf, AnyObject) {
  // A prefixed grammar is embedded: the caller supplies `root`.
  testing::Acceptor a("root ::= j-root\n" + json_object_ebnf("j-"));
  EXPECT_TRUE(a.accepts(R"({})"));
  EXPECT_TRUE(a.accepts(R"({"a": [1, 2.5e3, "x\n\u00e9"], "b": {"c": null, "d": true}})"));
  EXPECT_FALSE(a.accepts(R"([])"));
  EXPECT_FALSE(a.accepts(R"({"a":1,})"));
  EXPECT_FALSE(a.accepts("{\"a\":\"\x01\"}"));
}

struct Case {
  const char* schema;
  std::vector<const char*> valid;
  std::vector<const char*> invalid;
};

void check_cases(const std::vector<Case>& cases, JsonSchemaOptions options = {}) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const std::string ebnf = compile(c.schema, options);
    testing::Acceptor a(ebnf);
    ASSERT_TRUE(a.ok());
    for (const char* v : c.valid)
      EXPECT_TRUE(a.accepts(v)) << "should accept " << v << "\n" << ebnf;
    for (const char* v : c.invalid)
      EXPECT_FALSE(a.accepts(v)) << "should reject " << v << "\n" << ebnf;
  }
}

TEST(JsonSchemaAcceptance, Scalars) {
  check_cases({
      {R"({"type":"string"})",
       {R"("")", R"("a b")", R"("\"\\\/\b\f\n\r\t\u00Ff")", "\"\xc3\xa9\""},
       {R"(")", R"("\x")", R"("\u12")", "\"\n\"", R"(1)", R"("a" )"}},
      {R"({"type":"integer"})", {"0", "-1", "-0", "1234567890"}, {"01", "1.0", "+1", "", "-"}},
      {R"({"type":"number"})",
       {"0", "-0.5", "1e10", "2.5E-3", "10"},
       {".5", "1.", "01", "1e", "--1"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1"}},
      {R"({"type":"null"})", {"null"}, {"nul", "None"}},
      {R"({"type":["string","null"]})", {"null", R"("x")"}, {"1"}},
      {R"({"type":"string","nullable":true})", {"null", R"("x")"}, {"1"}},
      {R"({"type":"integer","minimum":-15,"maximum":250})",
       {"-15", "-9", "-1", "0", "7", "99", "100", "249", "250"},
       {"-16", "-0", "251", "300", "1000", "-100"}},
      {R"({"type":"integer","exclusiveMinimum":0})", {"1", "99999"}, {"0", "-1"}},
      {R"({"type":"integer","minimum":1000})", {"1000", "5555", "123456"}, {"999", "0", "-1000"}},
      {R"({"type":"integer","maximum":-10})", {"-10", "-11", "-99999"}, {"-9", "0", "10"}},
      {R"({"type":"integer","minimum":1.5,"maximum":3.5})", {"2", "3"}, {"1", "4"}},
      {R"({"type":"number","minimum":0})", {"0", "0.5", "12.25e3"}, {"-1", "-0.5"}},
      {R"({"type":"number","exclusiveMinimum":0})", {"0.001", "5", "1.5"}, {"0", "0.0", "-1"}},
      {R"({"type":"number","minimum":0,"maximum":1})",
       {"0", "0.5", "1", "1.000", "0.999"},
       {"1.01", "2", "-0.1"}},
      {R"({"type":"number","minimum":-2.0,"maximum":100})",
       {"-2", "-1.5", "-0", "0", "99.99", "100", "100.0"},
       {"-2.01", "-3", "100.5", "101"}},
      {R"({"type":"number","minimum":3})", {"3", "3.5", "1000.25"}, {"2.99", "-3"}},
      {R"({"type":"number","maximum":-1})", {"-1", "-1.5", "-200"}, {"-0.5", "0", "1"}},
      {R"({"type":"number","minimum":5,"maximum":5})", {"5", "5.00"}, {"5.01", "4.9"}},
      {R"({"type":"string","minLength":1,"maxLength":3})",
       {R"("a")", R"("\nbc")"},
       {R"("")", R"("abcd")"}},
      {R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})",
       {R"("AB-123")"},
       {R"("ab-123")", R"("AB-12")"}},
      {R"({"type":"string","pattern":"a\"b\\\\c"})", {R"("a\"b\\c")"}, {R"("a"b\c")"}},
      {R"({"type":"string","pattern":"^.+$"})", {R"("x y")"}, {R"("")", R"(""")", "\"\n\""}},
      {R"({"type":"string","format":"date"})",
       {R"("2024-02-29")"},
       {R"("2024-13-01")", R"("24-01-01")"}},
      {R"({"type":"string","format":"time"})",
       {R"("23:59:59Z")", R"("01:02:03.123+05:30")"},
       {R"("24:00:00Z")"}},
      {R"({"type":"string","format":"date-time"})",
       {R"("2024-01-15T10:30:00Z")"},
       {R"("2024-01-15 10:30:00Z")"}},
      {R"({"type":"string","format":"uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")"}},
      {R"({"type":"string","format":"email"})",
       {R"("a.b+c@ex-ample.co.uk")"},
       {R"("a@b")", R"("@b.c")"}},
      {R"({"enum":["red","green",3,{"a":1},[true],null]})",
       {R"("red")", R"("green")", "3", R"({"a":1})", "[true]", "null"},
       {R"("blue")", "4", R"({"a": 1})"}},
      {R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"}},
      {R"({})", {"1", R"({"a":[null]})", R"("x")"}, {"", "nul"}},
      {"true", {"[]", "false"}, {"tru"}},
  });
}

TEST(JsonSchemaAcceptance, Objects) {
  check_cases({
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
           "required":["name","age"],"additionalProperties":false})",
       {R"({"name":"a","age":3})", R"({"name": "a", "age": 3})"},
       {R"({"age":3,"name":"a"})", R"({"name":"a"})", R"({"name":"a","age":3,"x":1})",
        R"({ "name":"a","age":3})", R"({"name":  "a","age":3})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
           "additionalProperties":false})",
       {"{}", R"({"a":1})", R"({"b":1})", R"({"c":1})", R"({"a":1,"c":3})",
        R"({"a":1,"b":2,"c":3})", R"({"b":2,"c":3})"},
       {R"({"b":1,"a":2})", R"({"a":1,"a":1})", R"({,"a":1})", R"({"a":1,})", R"({"d":1})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
       {R"({"a":1})", R"({"a":1,"b":"x"})", R"({"a":1,"ab":[1],"":null})"},
       {R"({"a":1,"a":2})", R"({"b":1})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}}})",
       {"{}", R"({"a":1})", R"({"b":1})", R"({"a":1,"b":1,"c":2})", R"({"aa":1})",
        R"({"\u0062":1})"},
       {R"({"a":"x"})", R"({"b":1,"a":1})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {"{}", R"({"x":1,"y":2})"},
       {R"({"x":"1"})"}},
      {R"({"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"array","items":
           {"type":"object","properties":{"r":{"type":"boolean"}},"required":["r"],"additionalProperties":false}}},
           "required":["q"],"additionalProperties":false}},"required":["p"],"additionalProperties":false})",
       {R"({"p":{"q":[]}})", R"({"p":{"q":[{"r":true}, {"r":false}]}})"},
       {R"({"p":{"q":[{}]}})"}},
      {R"({"type":"object","properties":{"a b":{"type":"null"},"\"q\"":{"type":"null"}},"required":["a b","\"q\""],
           "additionalProperties":false})",
       {R"({"a b":null,"\"q\"":null})"},
       {R"({"a b":null})"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                    {"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"],
                     "additionalProperties":false}]})",
       {R"({"a":1,"b":"x"})"},
       {R"({"a":1})", R"({"b":"x","a":1})"}},
  });
  JsonSchemaOptions strict;
  strict.strict = true;
  check_cases({{R"({"type":"object","properties":{"a":{"type":"integer"}}})",
                {"{}", R"({"a":1})"},
                {R"({"b":1})"}}},
              strict);
}

TEST(JsonSchemaAcceptance, Arrays) {
  check_cases({
      {R"({"type":"array","items":{"type":"integer"}})",
       {"[]", "[1]", "[1, 2,3]"},
       {"[1,]", "[,]", "[ 1]", R"(["a"])"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
       {"[1,2]", "[1,2,3]"},
       {"[]", "[1]", "[1,2,3,4]"}},
      {R"({"type":"array","minItems":1})", {"[1]", R"([{"a":null},"x"])"}, {"[]"}},
      {R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {R"(["a",1])"},
       {R"(["a"])", R"(["a",1,2])", R"([1,"a"])"}},
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},"maxItems":3})",
       {R"(["a"])", R"(["a",1,2])"},
       {R"(["a",1,2,3])", "[]"}},
  });
}

TEST(JsonSchemaAcceptance, RefsAndUnions) {
  check_cases({
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
           "required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
       {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
       {R"({"v":1})", R"({"v":1,"next":{"v":2}})"}},
      {R"({"definitions":{"pt":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2}},
           "type":"object","properties":{"a":{"$ref":"#/definitions/pt"},"b":{"$ref":"#/definitions/pt"}},
           "required":["a","b"],"additionalProperties":false})",
       {R"({"a":[1,2],"b":[3.5,-4]})"},
       {R"({"a":[1],"b":[3,4]})"}},
      {R"({"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}},"additionalProperties":false})",
       {"{}", R"({"children":[{},{"children":[]}]})"},
       {R"({"children":[1]})"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})",
       {"1", R"("ab")"},
       {R"("abc")", "1.5"}},
      {R"({"oneOf":[{"const":"a"},{"const":"b"}]})", {R"("a")", R"("b")"}, {R"("c")"}},
      {R"({"$defs":{"string":{"type":"integer"}},"$ref":"#/$defs/string"})", {"5"}, {R"("x")"}},
  });
}

TEST(JsonSchemaAcceptance, CompactWhitespace) {
  JsonSchemaOptions compact;
  compact.any_whitespace = false;
  check_cases(
      {{R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})",
        {R"({"a":[1,2]})"},
        {R"({"a": [1,2]})", R"({"a":[1, 2]})"}}},
      compact);
}

}  // namespace
}  // namespace omnibus::grammar
