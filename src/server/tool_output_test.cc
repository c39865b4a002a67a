#include "server/tool_output.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

bool is_call_id(const std::string& id) {
  if (id.size() != 29 || id.rfind("call_", 0) != 0) return false;
  for (size_t i = 5; i < id.size(); ++i) {
    if (!std::isalnum(static_cast<unsigned char>(id[i]))) return false;
  }
  return true;
}

TEST(ChoiceToolCalls, StreamDeltasAndMessageCalls) {
  ChoiceToolCalls t(ToolParserKind::kHermes);
  ChoiceToolCalls::Delta a =
      t.push("Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool", false);
  EXPECT_EQ(a.content, "Checking.\n");
  EXPECT_TRUE(a.tool_calls.empty());
  ChoiceToolCalls::Delta b = t.push("_call>\n<tool_call>{\"name\": \"g\"}</tool_call>", false);
  EXPECT_EQ(b.content, "");
  ASSERT_EQ(b.tool_calls.size(), 2u);
  EXPECT_EQ(b.tool_calls[0]["index"], 0);
  EXPECT_EQ(b.tool_calls[1]["index"], 1);
  EXPECT_EQ(b.tool_calls[0]["type"], "function");
  EXPECT_EQ(b.tool_calls[0]["function"]["name"], "f");
  EXPECT_EQ(b.tool_calls[0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(b.tool_calls[1]["function"]["arguments"], "{}");
  EXPECT_TRUE(is_call_id(b.tool_calls[0]["id"])) << b.tool_calls[0]["id"];
  EXPECT_NE(b.tool_calls[0]["id"], b.tool_calls[1]["id"]);
  ChoiceToolCalls::Delta c = t.push("\n", true);
  EXPECT_EQ(c.content, "");
  EXPECT_TRUE(t.ended());
  ASSERT_EQ(t.n_calls(), 2);
  EXPECT_FALSE(t.calls()[0].contains("index"));
  EXPECT_EQ(t.calls()[0]["id"], b.tool_calls[0]["id"]);
  EXPECT_TRUE(t.push("more", true).content.empty());  // after the end: nothing
}

TEST(ChoiceToolCalls, FinishReasonAndContent) {
  EXPECT_EQ(tool_finish_reason("stop", 1), "tool_calls");
  EXPECT_EQ(tool_finish_reason("stop", 0), "stop");
  EXPECT_EQ(tool_finish_reason("length", 2), "length");
  EXPECT_EQ(tool_message_content(" \n", 1), nullptr);
  EXPECT_EQ(tool_message_content(" Sure.\n", 1), "Sure.");
  EXPECT_EQ(tool_message_content(" Sure.\n", 0), " Sure.\n");
  EXPECT_TRUE(is_call_id(new_tool_call_id()));
}

}  // namespace
}  // namespace omnibus::server
