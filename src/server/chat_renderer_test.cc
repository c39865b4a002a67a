#include "server/chat_renderer.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

TEST(ChatRenderer, ChatMlFallback) {
  ChatRenderer r = chatml_renderer();
  StatusOr<std::string> s = r({{"system", "Be brief."}, {"user", "Hi"}}, true, {});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(*s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  StatusOr<std::string> no_prompt = r({{"user", "Hi"}}, false, {});
  ASSERT_TRUE(no_prompt.is_ok());
  EXPECT_EQ(*no_prompt, "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatRenderer, TemplateErrorsAreStatuses) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse("{{ raise_exception('no system role') }}");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ChatRenderer r = template_renderer(std::move(t).value(), "<s>", "</s>");
  StatusOr<std::string> s = r({{"user", "x"}}, true, {});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("no system role"), std::string::npos);
}

}  // namespace
}  // namespace omnibus::server
