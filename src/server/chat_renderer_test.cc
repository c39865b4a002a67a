#include "server/chat_renderer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace omnibus::server {
namespace {

TEST(ChatRenderer, ChatMlFallback) {
  ChatRenderer r = chatml_renderer();
  StatusOr<std::string> s = r({{"system", "Be brief."}, {"user", "Hi"}}, true, {}, "");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(*s,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  StatusOr<std::string> no_prompt = r({{"user", "Hi"}}, false, {}, "");
  ASSERT_TRUE(no_prompt.is_ok());
  EXPECT_EQ(*no_prompt, "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatRenderer, TemplateErrorsAreStatuses) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse("{{ raise_exception('no system role') }}");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ChatRenderer r = template_renderer(std::move(t).value(), "<s>", "</s>");
  StatusOr<std::string> s = r({{"user", "x"}}, true, {}, "");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("no system role"), std::string::npos);
}

// Qwen 3's own template: chat_template_kwargs reach it (enable_thinking false
// renders the empty thinking block into the prompt), and an assistant turn's
// reasoning_content is shown in the history's last assistant turn.
TEST(ChatRenderer, Qwen3ThinkingKwargsAndReasoningContent) {
  std::ifstream in(std::string(OMNIBUS_SOURCE_DIR) + "/tests/golden/chat/templates/qwen3.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  StatusOr<ChatTemplate> t = ChatTemplate::parse(ss.str());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ChatRenderer r = template_renderer(std::move(t).value(), "", "<|im_end|>");
  StatusOr<std::string> think = r({{"user", "Hi"}}, true, {}, "");
  ASSERT_TRUE(think.is_ok()) << think.status().to_string();
  EXPECT_EQ(*think, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  StatusOr<std::string> no_think = r({{"user", "Hi"}}, true, {}, R"({"enable_thinking": false})");
  ASSERT_TRUE(no_think.is_ok()) << no_think.status().to_string();
  EXPECT_EQ(*no_think,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  StatusOr<std::string> on = r({{"user", "Hi"}}, true, {}, R"({"enable_thinking": true})");
  ASSERT_TRUE(on.is_ok());
  EXPECT_EQ(*on, *think);

  ChatMessage a("assistant", "4");
  a.reasoning_content = "2 + 2 is 4.";
  StatusOr<std::string> hist = r({{"user", "2+2?"}, a}, false, {}, "");
  ASSERT_TRUE(hist.is_ok()) << hist.status().to_string();
  EXPECT_NE(hist->find("<|im_start|>assistant\n<think>\n2 + 2 is 4.\n</think>\n\n4<|im_end|>"),
            std::string::npos)
      << *hist;
  EXPECT_FALSE(r({{"user", "x"}}, true, {}, "[1]").is_ok());  // kwargs must be an object
}

}  // namespace
}  // namespace omnibus::server
