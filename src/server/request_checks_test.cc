#include "server/request_checks.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

TEST(BearerKey, SchemeIsCaseInsensitiveKeyIsNot) {
  EXPECT_TRUE(bearer_key_matches("Bearer sekret", "sekret"));
  EXPECT_TRUE(bearer_key_matches("bearer sekret", "sekret"));
  EXPECT_TRUE(bearer_key_matches("BEARER sekret", "sekret"));
  EXPECT_TRUE(bearer_key_matches("Bearer   sekret", "sekret"));
  EXPECT_FALSE(bearer_key_matches("Bearer SEKRET", "sekret"));
  EXPECT_FALSE(bearer_key_matches("Bearer sekre", "sekret"));
  EXPECT_FALSE(bearer_key_matches("Bearer sekrett", "sekret"));
  EXPECT_FALSE(bearer_key_matches("Bearersekret", "sekret"));
  EXPECT_FALSE(bearer_key_matches("Basic sekret", "sekret"));
  EXPECT_FALSE(bearer_key_matches("sekret", "sekret"));
  EXPECT_FALSE(bearer_key_matches("", "sekret"));
  EXPECT_FALSE(bearer_key_matches("Bearer ", "sekret"));
}

TEST(JsonMediaType, JsonWithParametersAndSuffixes) {
  EXPECT_TRUE(is_json_media_type("application/json"));
  EXPECT_TRUE(is_json_media_type("application/json; charset=utf-8"));
  EXPECT_TRUE(is_json_media_type("Application/JSON;charset=UTF-8"));
  EXPECT_TRUE(is_json_media_type(" application/json "));
  EXPECT_TRUE(is_json_media_type("application/vnd.api+json"));
  EXPECT_FALSE(is_json_media_type(""));
  EXPECT_FALSE(is_json_media_type("text/plain"));
  EXPECT_FALSE(is_json_media_type("text/json"));
  EXPECT_FALSE(is_json_media_type("application/x-www-form-urlencoded"));
  EXPECT_FALSE(is_json_media_type("application/+json"));
  EXPECT_FALSE(is_json_media_type("application/jsonx"));
  EXPECT_FALSE(is_json_media_type("multipart/form-data; boundary=x"));
}

}  // namespace
}  // namespace omnibus::server
