#include "server/tool_grammar.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
#include "server/tool_request.h"

namespace omnibus::server {
namespace {

ToolsSpec weather_tools(ToolChoice choice, bool parallel) {
  ToolsSpec t;
  ToolFunction w;
  w.name = "get_weather";
  w.parameters =
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                     "additionalProperties": false})";
  ToolFunction n;
  n.name = "noop";
  t.functions = {w, n};
  t.choice = choice;
  t.named = choice == ToolChoice::kNamed ? "get_weather" : "";
  t.parallel_tool_calls = parallel;
  return t;
}

TEST(ToolGrammar, HermesTextShape) {
  StatusOr<std::string> g =
      tool_call_grammar(weather_tools(ToolChoice::kRequired, true), ToolParserKind::kHermes);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_NE(g->find("root ::= tool-call ("), std::string::npos) << *g;
  EXPECT_NE(g->find("t0-root"), std::string::npos);
  EXPECT_NE(g->find("t1-root"), std::string::npos);
  EXPECT_NE(g->find("get_weather"), std::string::npos);
  EXPECT_NE(g->find("noop"), std::string::npos);
  StatusOr<std::shared_ptr<const grammar::Grammar>> parsed = grammar::parse_ebnf(*g);
  EXPECT_TRUE(parsed.is_ok()) << parsed.status().to_string() << "\n" << *g;

  StatusOr<std::string> named =
      tool_call_grammar(weather_tools(ToolChoice::kNamed, false), ToolParserKind::kHermes);
  ASSERT_TRUE(named.is_ok());
  EXPECT_EQ(named->find("noop"), std::string::npos) << *named;
  EXPECT_NE(named->find("root ::= tool-call\n"), std::string::npos) << *named;
  for (ToolParserKind k : {ToolParserKind::kLlama3Json, ToolParserKind::kMistral}) {
    StatusOr<std::string> other = tool_call_grammar(weather_tools(ToolChoice::kRequired, true), k);
    ASSERT_TRUE(other.is_ok());
    EXPECT_TRUE(grammar::parse_ebnf(*other).is_ok()) << *other;
  }
}

// Whole text accepted by the grammar (and may end there).
bool accepts(const std::string& ebnf, const std::string& text) {
  StatusOr<std::shared_ptr<const grammar::Grammar>> g = grammar::parse_ebnf(ebnf);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  if (!g.is_ok()) return false;
  grammar::GrammarMatcher m(*g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(ToolGrammar, AcceptsWhatTheParserReads) {
  const std::string call_w =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  const std::string call_n =
      "<tool_call>\n{\"name\": \"noop\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>";
  StatusOr<std::string> req =
      tool_call_grammar(weather_tools(ToolChoice::kRequired, true), ToolParserKind::kHermes);
  ASSERT_TRUE(req.is_ok());
  EXPECT_TRUE(accepts(*req, call_w)) << *req;
  EXPECT_TRUE(accepts(*req, call_n));
  EXPECT_TRUE(accepts(*req, call_w + "\n" + call_n));
  EXPECT_FALSE(accepts(*req, "Sure! " + call_w));
  EXPECT_FALSE(
      accepts(*req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      accepts(*req, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  ToolParseOutput parsed = parse_tool_calls(ToolParserKind::kHermes, call_w + "\n" + call_n);
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");

  StatusOr<std::string> one =
      tool_call_grammar(weather_tools(ToolChoice::kNamed, false), ToolParserKind::kHermes);
  ASSERT_TRUE(one.is_ok());
  EXPECT_TRUE(accepts(*one, call_w));
  EXPECT_FALSE(accepts(*one, call_n));
  EXPECT_FALSE(accepts(*one, call_w + "\n" + call_w));

  StatusOr<std::string> llama =
      tool_call_grammar(weather_tools(ToolChoice::kRequired, true), ToolParserKind::kLlama3Json);
  ASSERT_TRUE(llama.is_ok());
  const std::string l =
      "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; {\"name\": \"noop\", "
      "\"parameters\": {}}";
  EXPECT_TRUE(accepts(*llama, l)) << *llama;
  EXPECT_EQ(parse_tool_calls(ToolParserKind::kLlama3Json, l).calls.size(), 2u);

  StatusOr<std::string> mistral =
      tool_call_grammar(weather_tools(ToolChoice::kRequired, true), ToolParserKind::kMistral);
  ASSERT_TRUE(mistral.is_ok());
  const std::string mi =
      "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, {\"name\": "
      "\"noop\", \"arguments\": {}}]";
  EXPECT_TRUE(accepts(*mistral, mi)) << *mistral;
  EXPECT_EQ(parse_tool_calls(ToolParserKind::kMistral, mi).calls.size(), 2u);
}

ToolsSpec keyword_tools(ToolChoice choice, bool parallel) {
  ToolsSpec t;
  ToolFunction w;
  w.name = "get_weather";
  w.parameters = R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                     "days": {"type": "integer", "minimum": 1, "maximum": 9}},
                     "required": ["city"], "additionalProperties": false})";
  ToolFunction o;
  o.name = "opts";
  o.parameters =
      R"({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "integer"}}})";
  t.functions = {w, o};
  t.choice = choice;
  t.named = choice == ToolChoice::kNamed ? "get_weather" : "";
  t.parallel_tool_calls = parallel;
  return t;
}

TEST(ToolGrammar, Qwen3CoderAcceptsWhatTheParserReads) {
  StatusOr<std::string> g =
      tool_call_grammar(keyword_tools(ToolChoice::kRequired, true), ToolParserKind::kQwen3Coder);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const std::string w =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  const std::string o =
      "<tool_call>\n<function=opts>\n<parameter=b>\n-4\n</parameter>\n</function>\n</tool_call>";
  EXPECT_TRUE(accepts(*g, w)) << *g;
  EXPECT_TRUE(accepts(*g, o));
  EXPECT_TRUE(accepts(*g, w + "\n" + o));
  EXPECT_FALSE(accepts(
      *g, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));  // city required
  EXPECT_FALSE(
      accepts(*g,
              "<tool_call>\n<function=get_weather>\n<parameter=city>\nA much too long city\n"
              "</parameter>\n</function>\n</tool_call>"));  // maxLength 12
  EXPECT_FALSE(
      accepts(*g,
              "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n"
              "<parameter=unit>\nkelvin\n</parameter>\n</function>\n</tool_call>"));  // enum
  auto types = tool_param_types(keyword_tools(ToolChoice::kRequired, true));
  StreamingToolParser p(ToolParserKind::kQwen3Coder, types);
  ToolParseOutput out = p.push(w + "\n" + o);
  ToolParseOutput rest = p.finish();
  out.calls.insert(out.calls.end(), rest.calls.begin(), rest.calls.end());
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"San Jose","days":3})");
  EXPECT_EQ(out.calls[1].arguments, R"({"b":-4})");
  StatusOr<std::string> one =
      tool_call_grammar(keyword_tools(ToolChoice::kNamed, false), ToolParserKind::kQwen3Coder);
  ASSERT_TRUE(one.is_ok());
  EXPECT_TRUE(accepts(*one, w));
  EXPECT_FALSE(accepts(*one, o));
  EXPECT_FALSE(accepts(*one, w + "\n" + w));
}

TEST(ToolGrammar, PythonicAcceptsWhatTheParserReads) {
  StatusOr<std::string> g =
      tool_call_grammar(keyword_tools(ToolChoice::kRequired, true), ToolParserKind::kPythonic);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  const std::string w = "get_weather(city=\"Oslo\", unit=\"celsius\")";
  for (const std::string& text : std::vector<std::string>{
           "[" + w + "]", "[get_weather(city=\"Oslo\", days=2)]", "[opts()]", "[opts(b=3)]",
           "[opts(a=true, b=3)]", "[" + w + ", opts(a=false)]"}) {
    EXPECT_TRUE(accepts(*g, text)) << text << "\n" << *g;
    ToolParseOutput parsed = parse_tool_calls(ToolParserKind::kPythonic, text);
    EXPECT_FALSE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, "") << text;
  }
  EXPECT_FALSE(accepts(*g, "[get_weather()]"));  // city required
  EXPECT_FALSE(accepts(*g, "[opts(, b=3)]"));
  EXPECT_FALSE(accepts(*g, "[get_weather(days=2, city=\"Oslo\")]"));  // the schema's order
  EXPECT_EQ(parse_tool_calls(ToolParserKind::kPythonic, "[opts(a=true, b=3)]").calls[0].arguments,
            R"({"a":true,"b":3})");
  StatusOr<std::string> one =
      tool_call_grammar(keyword_tools(ToolChoice::kNamed, false), ToolParserKind::kPythonic);
  ASSERT_TRUE(one.is_ok());
  EXPECT_TRUE(accepts(*one, "[" + w + "]"));
  EXPECT_FALSE(accepts(*one, "[" + w + ", " + w + "]"));
}

TEST(ToolGrammar, Qwen3CoderRefusesStringPatterns) {
  ToolsSpec t = keyword_tools(ToolChoice::kRequired, true);
  t.functions[0].parameters =
      R"({"type": "object", "properties": {"c": {"type": "string", "pattern": "a+"}}})";
  StatusOr<std::string> g = tool_call_grammar(t, ToolParserKind::kQwen3Coder);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("tools[0].function.parameters: 'c'"), std::string::npos)
      << g.status().message();
  EXPECT_TRUE(
      tool_call_grammar(t, ToolParserKind::kPythonic).is_ok());  // JSON strings take patterns
}

TEST(ToolGrammar, BadSchemaNamesTheTool) {
  ToolsSpec t = weather_tools(ToolChoice::kRequired, true);
  t.functions[0].parameters = R"({"not": {"type": "string"}})";
  StatusOr<std::string> g = tool_call_grammar(t, ToolParserKind::kHermes);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("tools[0].function.parameters"), std::string::npos)
      << g.status().message();
}

}  // namespace
}  // namespace omnibus::server
