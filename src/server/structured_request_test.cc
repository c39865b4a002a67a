#include "server/structured_request.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

using Kind = grammar::StructuredOutput::Kind;
using nlohmann::json;

ApiResult<GenerationSpec> chat(const std::string& extra) {
  ParseLimits l;
  l.n_vocab = 1000;
  return parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": "hi"}])" + extra + "}"), l);
}
ApiResult<GenerationSpec> completion(const std::string& extra) {
  ParseLimits l;
  l.n_vocab = 1000;
  return parse_completion_request(json::parse(R"({"prompt": "hi")" + extra + "}"), l);
}

TEST(StructuredRequest, EverySpellingGivesItsKindOnBothEndpoints) {
  struct Case {
    std::string field;
    Kind kind;
    std::string text;
  };
  const std::vector<Case> cases = {
      {R"("response_format": {"type": "json_object"})", Kind::kJsonObject, ""},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer"}}})",
       Kind::kJsonSchema, R"({"type":"integer"})"},
      {R"("structured_outputs": {"json": {"type": "string"}})", Kind::kJsonSchema,
       R"({"type":"string"})"},
      {R"("structured_outputs": {"regex": "a+"})", Kind::kRegex, "a+"},
      {R"("structured_outputs": {"grammar": "root ::= \"a\""})", Kind::kGrammar, "root ::= \"a\""},
      {R"("structured_outputs": {"json_object": true})", Kind::kJsonObject, ""},
      {R"("guided_json": "{\"type\": \"boolean\"}")", Kind::kJsonSchema, R"({"type": "boolean"})"},
      {R"("guided_regex": "[0-9]+")", Kind::kRegex, "[0-9]+"},
      {R"("guided_grammar": "root ::= \"b\"")", Kind::kGrammar, "root ::= \"b\""},
      {R"("json_schema": {"type": "null"})", Kind::kJsonSchema, R"({"type":"null"})"},
      {R"("grammar": "root ::= \"c\"")", Kind::kGrammar, "root ::= \"c\""},
  };
  for (const Case& c : cases) {
    for (auto parse : {chat, completion}) {
      SCOPED_TRACE(c.field);
      auto r = parse(", " + c.field);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->structured.kind, c.kind);
      EXPECT_EQ(r->structured.text, c.text);
    }
  }
  auto choice = chat(R"(, "guided_choice": ["yes", "no"])");
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->structured.kind, Kind::kChoice);
  EXPECT_EQ(choice->structured.choices, (std::vector<std::string>{"yes", "no"}));
  auto strict = chat(
      R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": true}})");
  ASSERT_TRUE(strict.ok());
  EXPECT_TRUE(strict->structured.strict);
  EXPECT_EQ(strict->schema_pointer, "/response_format/json_schema/schema");
  auto text = chat(R"(, "response_format": {"type": "text"})");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->structured.kind, Kind::kNone);
}

TEST(StructuredRequest, BadOrConflictingFieldsAre400sNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("response_format": {"type": "yaml"})", "response_format.type"},
      {R"("response_format": "json")", "response_format"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})",
       "response_format.json_schema.schema"},
      {R"("structured_outputs": {"structural_tag": "x"})", "structured_outputs.structural_tag"},
      {R"("structured_outputs": {"regex": ""})", "structured_outputs.regex"},
      {R"("guided_choice": [])", "guided_choice"},
      {R"("guided_choice": ["a", 1])", "guided_choice[1]"},
      {R"("guided_json": "{not json")", "guided_json"},
      {R"("guided_json": 3)", "guided_json"},
      {R"("guided_whitespace_pattern": " ")", "guided_whitespace_pattern"},
      {R"("guided_regex": "a", "guided_json": {})", "guided_regex"},  // read after guided_json
      {R"("response_format": {"type": "json_object"}, "grammar": "root ::= \"a\"")", "grammar"},
  };
  for (const auto& [field, param] : cases) {
    SCOPED_TRACE(field);
    auto r = chat(", " + field);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().param, param) << r.error().message;
  }
}

TEST(StructuredRequest, OrderedSchemaTextKeepsTheClientsKeyOrder) {
  const std::string body =
      R"({"json_schema": {"properties": {"zeta": {}, "alpha": {}}, "type": "object"}})";
  EXPECT_EQ(ordered_schema_text(body, "/json_schema"),
            R"({"properties":{"zeta":{},"alpha":{}},"type":"object"})");
  EXPECT_EQ(ordered_schema_text(body, "/missing"), "");
  EXPECT_EQ(ordered_schema_text("{broken", "/json_schema"), "");
}

}  // namespace
}  // namespace omnibus::server
