#include "server/tool_parsers.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

struct Case {
  ToolParserKind kind;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // (name, arguments)
};

std::vector<std::pair<std::string, std::string>> pairs(const std::vector<ParsedToolCall>& calls) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ParsedToolCall& c : calls) out.emplace_back(c.name, c.arguments);
  return out;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      // hermes
      {ToolParserKind::kHermes, "Hello there.", "Hello there.", {}},
      {ToolParserKind::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
       "\"c\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris","unit":"c"})"}}},
      {ToolParserKind::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"z\": 1, \"b\": [1, "
       "2]}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
       "Let me check.\n",
       {{"a", R"({"z":1,"b":[1,2]})"}, {"b", "{}"}}},
      // unclosed last call: parsed at the end
      {ToolParserKind::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"</tool\"}}",
       "",
       {{"f", R"({"x":"</tool"})"}}},
      // a string argument holding the close marker (a sampled model under the
      // tool grammar wrote one): the call ends where its JSON value ends
      {ToolParserKind::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris}}</tool_call> "
       "x\", \"unit\": \"celsius\"}}\n</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris}}</tool_call> x","unit":"celsius"})"}}},
      // invalid JSON: no call, the text stays content
      {ToolParserKind::kHermes,
       "x <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> y",
       "x <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> y",
       {}},
      // no name: no call
      {ToolParserKind::kHermes,
       "<tool_call>{\"arguments\": {}}</tool_call>",
       "<tool_call>{\"arguments\": {}}</tool_call>",
       {}},
      // arguments given as JSON text
      {ToolParserKind::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
       "",
       {{"f", R"({"a":1})"}}},
      // text after a call is content; a marker look-alike stays text
      {ToolParserKind::kHermes,
       "<tool_call>{\"name\": \"f\"}</tool_call>\nDone <tool_c",
       "\nDone <tool_c",
       {{"f", "{}"}}},
      // llama3_json
      {ToolParserKind::kLlama3Json, "The answer is 4.", "The answer is 4.", {}},
      {ToolParserKind::kLlama3Json,
       "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"x;y\"}}",
       "",
       {{"f", R"({"q":"x;y"})"}}},
      {ToolParserKind::kLlama3Json,
       " {\"name\": \"f\", \"parameters\": {\"a\": \"}\"}}; {\"name\": \"g\", \"arguments\": "
       "{\"b\": 2}}",
       "",
       {{"f", R"({"a":"}"})"}, {"g", R"({"b":2})"}}},
      {ToolParserKind::kLlama3Json, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {}},
      {ToolParserKind::kLlama3Json, "<|pyth", "<|pyth", {}},
      {ToolParserKind::kLlama3Json,
       "{\"name\": \"f\", \"parameters\": {}} and then text",
       "and then text",
       {{"f", "{}"}}},
      // mistral
      {ToolParserKind::kMistral, "Plain [text].", "Plain [text].", {}},
      {ToolParserKind::kMistral,
       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", "
       "\"arguments\": {\"s\": \"]\"}}]",
       "",
       {{"f", R"({"a":1})"}, {"g", R"({"s":"]"})"}}},
      {ToolParserKind::kMistral,
       "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {}}]",
       "Sure. ",
       {{"f", "{}"}}},
      {ToolParserKind::kMistral, "[TOOL_CALLS][{\"name\": 3}]", "[TOOL_CALLS][{\"name\": 3}]", {}},
      {ToolParserKind::kMistral, "[TOOL_CALLS] nope", "[TOOL_CALLS] nope", {}},
      {ToolParserKind::kMistral,
       "[TOOL_CALLS][{\"name\": \"f\"",
       "[TOOL_CALLS][{\"name\": \"f\"",
       {}},
      // qwen3_coder (no parameter types known: JSON when it is JSON, else text)
      {ToolParserKind::kQwen3Coder,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</"
       "parameter>\n<parameter=days>\n3\n"
       "</parameter>\n</function>\n</tool_call>",
       "",
       {{"get_weather", R"({"city":"Paris","days":3})"}}},
      {ToolParserKind::kQwen3Coder,
       "Sure.\n<tool_call>\n<function=f>\n</function>\n</"
       "tool_call>\n<tool_call>\n<function=g>\n<parameter=o>\n"
       "{\"k\": [1, true]}\n</parameter>\n</function>\n</tool_call>",
       "Sure.\n",
       {{"f", "{}"}, {"g", R"({"o":{"k":[1,true]}})"}}},
      {ToolParserKind::kQwen3Coder,
       "<tool_call>\n<function=run>\n<parameter=code>\nif a < b:\n  x = "
       "1\n\n</parameter>\n</function>\n"
       "</tool_call>",
       "",
       {{"run", R"({"code":"if a < b:\n  x = 1\n"})"}}},
      // a missing </parameter>, or a JSON body: no call
      {ToolParserKind::kQwen3Coder,
       "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
       "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
       {}},
      {ToolParserKind::kQwen3Coder,
       "<tool_call>{\"name\": \"f\"}</tool_call>",
       "<tool_call>{\"name\": \"f\"}</tool_call>",
       {}},
      // pythonic
      {ToolParserKind::kPythonic,
       "[get_weather(city='Paris', unit=\"celsius\"), add(a=1, b=-2.5e1)]",
       "",
       {{"get_weather", R"({"city":"Paris","unit":"celsius"})"}, {"add", R"({"a":1,"b":-25.0})"}}},
      {ToolParserKind::kPythonic,
       "<|python_start|>[f(flag=True, x=None, items=[1, 'two', (3,)], opts={'k': False, \"j\": "
       "null},)]"
       "<|python_end|>",
       "",
       {{"f", R"({"flag":true,"x":null,"items":[1,"two",[3]],"opts":{"k":false,"j":null}})"}}},
      {ToolParserKind::kPythonic,
       " [pkg.search(q='a\\'b]\\n\\u00e9', n=0)] then text",
       "then text",
       {{"pkg.search", "{\"q\":\"a'b]\\n\u00e9\",\"n\":0}"}}},
      {ToolParserKind::kPythonic, "The list [1, 2] is short.", "The list [1, 2] is short.", {}},
      {ToolParserKind::kPythonic, "[1, 2, 3]", "[1, 2, 3]", {}},
      {ToolParserKind::kPythonic, "[f(1)]", "[f(1)]", {}},
      {ToolParserKind::kPythonic, "[f(a=1, a=2)]", "[f(a=1, a=2)]", {}},
      {ToolParserKind::kPythonic, "[f(a=1)", "[f(a=1)", {}},
      {ToolParserKind::kPythonic, "<|python_st", "<|python_st", {}},
  };
  return kCases;
}

TEST(ToolParsers, WholeText) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.text);
    ToolParseOutput out = parse_tool_calls(c.kind, c.text);
    EXPECT_EQ(out.content, c.content);
    EXPECT_EQ(pairs(out.calls), c.calls);
  }
}

// Any split of the text into two or three deltas gives the same content and calls.
TEST(ToolParsers, StreamingSplitAnywhereMatchesWholeText) {
  for (const Case& c : cases()) {
    for (size_t i = 0; i <= c.text.size(); ++i) {
      for (size_t j = i; j <= c.text.size(); j += 3) {
        SCOPED_TRACE(c.text + " split at " + std::to_string(i) + "," + std::to_string(j));
        StreamingToolParser p(c.kind);
        std::string content;
        std::vector<ParsedToolCall> calls;
        for (const ToolParseOutput& o : {p.push(std::string_view(c.text).substr(0, i)),
                                         p.push(std::string_view(c.text).substr(i, j - i)),
                                         p.push(std::string_view(c.text).substr(j)), p.finish()}) {
          content += o.content;
          calls.insert(calls.end(), o.calls.begin(), o.calls.end());
        }
        ASSERT_EQ(content, c.content);
        ASSERT_EQ(pairs(calls), c.calls);
        EXPECT_EQ(p.n_calls(), int(c.calls.size()));
      }
    }
  }
}

// Byte by byte: content that cannot start a marker is released at once, and
// a call is released as soon as it closes.
TEST(ToolParsers, StreamingReleasesEarly) {
  StreamingToolParser p(ToolParserKind::kHermes);
  EXPECT_EQ(p.push("Hi <").content, "Hi ");
  EXPECT_EQ(p.push("b>").content, "<b>");
  EXPECT_EQ(p.push("<tool_call>{\"name\": \"f\", \"arguments\": {}}").content, "");
  ToolParseOutput o = p.push("</tool_call>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].name, "f");
  EXPECT_EQ(p.push("\n").content, "");  // whitespace after a call is held, then dropped
  EXPECT_EQ(p.finish().content, "");
  EXPECT_TRUE(p.finished());
}

TEST(ToolParsers, Selection) {
  EXPECT_EQ(tool_parser_for_template("{{ '<tool_call>' }}"), ToolParserKind::kHermes);
  EXPECT_EQ(tool_parser_for_template("{{ '<|python_tag|>' }}"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(tool_parser_for_template("{{ '[TOOL_CALLS]' }}"), ToolParserKind::kMistral);
  EXPECT_EQ(tool_parser_for_template("{{ messages }}"), ToolParserKind::kHermes);
  EXPECT_EQ(tool_parser_from_name("llama3_json"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(tool_parser_from_name("mistral"), ToolParserKind::kMistral);
  EXPECT_EQ(tool_parser_from_name("auto"), std::nullopt);
  EXPECT_STREQ(tool_parser_name(ToolParserKind::kHermes), "hermes");
}

TEST(ToolParsers, Qwen3CoderReadsValuesByTheParameterTypes) {
  auto types = std::make_shared<ToolParamTypes>();
  (*types)["f"] = {{"s", "string"}, {"n", "integer"}, {"b", "boolean"}};
  StreamingToolParser p(ToolParserKind::kQwen3Coder, types);
  ToolParseOutput o = p.push(
      "<tool_call>\n<function=f>\n<parameter=s>\n42\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
      "<parameter=b>\nmaybe\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].arguments, R"({"s":"42","n":7,"b":"maybe"})");  // not JSON: kept as text
}

TEST(ToolParsers, NewFormatsSelection) {
  EXPECT_EQ(tool_parser_for_template("{{ '<tool_call>\n<function=' + name }}"),
            ToolParserKind::kQwen3Coder);
  EXPECT_EQ(tool_parser_for_template("{{ '<|python_start|>' }}"), ToolParserKind::kPythonic);
  EXPECT_EQ(tool_parser_for_template("Respond as [func_name1(params_name1=params_value1)]"),
            ToolParserKind::kPythonic);
  EXPECT_EQ(tool_parser_from_name("qwen3_coder"), ToolParserKind::kQwen3Coder);
  EXPECT_EQ(tool_parser_from_name("pythonic"), ToolParserKind::kPythonic);
  EXPECT_STREQ(tool_parser_name(ToolParserKind::kQwen3Coder), "qwen3_coder");
  EXPECT_STREQ(tool_parser_name(ToolParserKind::kPythonic), "pythonic");
}

TEST(ToolParsers, PythonicNestingIsBounded) {
  const std::string deep = "[f(a=" + std::string(200, '[') + std::string(200, ']') + ")]";
  EXPECT_TRUE(parse_tool_calls(ToolParserKind::kPythonic, deep).calls.empty());
  const std::string ok = "[f(a=" + std::string(20, '[') + std::string(20, ']') + ")]";
  EXPECT_EQ(parse_tool_calls(ToolParserKind::kPythonic, ok).calls.size(), 1u);
}

TEST(ToolParsers, JsonValueEnd) {
  EXPECT_EQ(json_value_end(R"({"a": "}"} tail)"), 10u);
  EXPECT_EQ(json_value_end(R"([{"a": "\"]"}], x)"), 14u);
  EXPECT_EQ(json_value_end(R"({"a": [)"), std::string_view::npos);
}

}  // namespace
}  // namespace omnibus::server
