#include "server/sse.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

TEST(Sse, EventIsOneDataLineAndABlankLine) {
  nlohmann::json j = {{"text", "a\nb"}};
  const std::string e = sse_event(j);
  EXPECT_EQ(e, "data: {\"text\":\"a\\nb\"}\n\n");
  // A newline in the text is escaped inside JSON, so it cannot end the event early.
  EXPECT_EQ(e.find('\n'), e.size() - 2);
}

TEST(Sse, Done) { EXPECT_EQ(sse_done(), "data: [DONE]\n\n"); }

TEST(Sse, InvalidUtf8IsReplacedNotThrown) {
  nlohmann::json j = {{"text", std::string("ok\xC3")}};
  EXPECT_EQ(json_dump(j), "{\"text\":\"ok\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace omnibus::server
