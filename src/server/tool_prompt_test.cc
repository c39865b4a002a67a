#include "server/tool_prompt.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "server/chat_renderer.h"
#include "server/openai_request.h"

namespace omnibus::server {
namespace {

using nlohmann::json;

std::string source_dir() {
  const char* env = std::getenv("OMNIBUS_SOURCE_DIR");
  return env ? env : OMNIBUS_SOURCE_DIR;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ChatRenderer renderer_for(const std::string& template_name) {
  const std::string path =
      source_dir() + "/tests/golden/chat/templates/" + template_name + ".jinja";
  StatusOr<ChatTemplate> t = ChatTemplate::parse(read_file(path));
  EXPECT_TRUE(t.is_ok()) << path << ": " << t.status().to_string();
  return template_renderer(std::move(t).value(), "<s>", "</s>");
}

// The request as the API parses it.
GenerationSpec parse(const json& messages, const json& tools) {
  ParseLimits l;
  l.n_vocab = 1000;
  ApiResult<GenerationSpec> r =
      parse_chat_request(json{{"messages", messages}, {"tools", tools}}, l);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? std::move(*r) : GenerationSpec{};
}

// Templates with tool support render tools, tool calls and tool results
// as HF's apply_chat_template does (tools/golden/gen_tool_golden.py).
TEST(ToolPrompt, MatchesHfRenderingForToolTemplates) {
  const json golden = json::parse(read_file(source_dir() + "/tests/golden/chat/tools_golden.json"));
  ASSERT_GE(golden["cases"].size(), 5u);
  for (const json& c : golden["cases"]) {
    SCOPED_TRACE(c["template"].get<std::string>() + " / " + c["conversation"].get<std::string>());
    GenerationSpec spec = parse(c["messages"], golden["tools"]);
    StatusOr<std::string> text =
        renderer_for(c["template"])(spec.messages, true, spec.tools.tool_jsons(), "");
    ASSERT_TRUE(text.is_ok()) << text.status().to_string();
    EXPECT_EQ(*text, c["expected"].get<std::string>());
  }
}

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_time",
    "parameters": {"type": "object", "properties": {}}}}])");

const json kResults = json::parse(R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Time?"},
  {"role": "assistant", "content": null, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
  {"role": "tool", "tool_call_id": "c1", "content": "14:05"},
  {"role": "tool", "tool_call_id": "c2", "content": "UTC"}])");

// Templates without tools get the Hermes description in the system message
// and tool calls / results as text.
TEST(ToolPrompt, InjectsHermesStyleForTemplatesWithoutTools) {
  GenerationSpec spec = parse(kResults, kTools);
  StatusOr<std::string> text = chatml_renderer()(spec.messages, true, spec.tools.tool_jsons(), "");
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  const std::string expected = "<|im_start|>system\nBe brief.\n\n" +
                               hermes_tools_system_text(spec.tools.tool_jsons()) +
                               "<|im_end|>\n<|im_start|>user\nTime?<|im_end|>\n"
                               "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_time\", "
                               "\"arguments\": {}}\n</tool_call><|im_end|>\n"
                               "<|im_start|>user\n<tool_response>\n14:05\n</"
                               "tool_response>\n<tool_response>\nUTC\n</tool_response>"
                               "<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(*text, expected);
  EXPECT_NE(expected.find("<tools>\n{\"function\":{\"name\":\"get_time\""), std::string::npos);

  // Gemma 3 folds the system message into the first user turn and needs
  // user/model alternation, which the rewrite keeps.
  StatusOr<std::string> gemma =
      renderer_for("gemma3")(spec.messages, true, spec.tools.tool_jsons(), "");
  ASSERT_TRUE(gemma.is_ok()) << gemma.status().to_string();
  EXPECT_NE(gemma->find("<start_of_turn>user\nBe brief.\n\n# Tools"), std::string::npos) << *gemma;
  EXPECT_NE(gemma->find("<start_of_turn>model\n<tool_call>"), std::string::npos) << *gemma;
  EXPECT_NE(gemma->find("<start_of_turn>user\n<tool_response>\n14:05"), std::string::npos)
      << *gemma;

  // Without tools in the request, no description; results still render.
  GenerationSpec no_tools = parse(kResults, json::array());
  StatusOr<std::string> plain = chatml_renderer()(no_tools.messages, true, {}, "");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->find("# Tools"), std::string::npos);
  EXPECT_NE(plain->find("<tool_response>\n14:05"), std::string::npos);
}

TEST(ToolPrompt, NoSystemMessageGetsOne) {
  std::vector<ChatMessage> m = {{"user", "hi"}};
  std::vector<ChatMessage> out =
      hermes_tool_messages(m, {R"({"type":"function","function":{"name":"f"}})"});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_EQ(out[1].content, "hi");
}

}  // namespace
}  // namespace omnibus::server
