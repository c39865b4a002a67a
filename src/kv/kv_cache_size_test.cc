#include "kv/kv_cache_size.h"

#include <gtest/gtest.h>

namespace omnibus {
namespace {

TEST(ParseByteSize, AcceptsBinaryDecimalAndPlainSizes) {
  EXPECT_EQ(*parse_byte_size("2GiB"), int64_t(2) << 30);
  EXPECT_EQ(*parse_byte_size("512MiB"), int64_t(512) << 20);
  EXPECT_EQ(*parse_byte_size("512mib"), int64_t(512) << 20);
  EXPECT_EQ(*parse_byte_size("64K"), int64_t(64) << 10);
  EXPECT_EQ(*parse_byte_size("1.5GiB"), int64_t(3) << 29);
  EXPECT_EQ(*parse_byte_size("3GB"), int64_t(3000000000));
  EXPECT_EQ(*parse_byte_size("1000000"), 1000000);
}

TEST(ParseByteSize, RejectsGarbage) {
  EXPECT_FALSE(parse_byte_size("").is_ok());
  EXPECT_FALSE(parse_byte_size("GiB").is_ok());
  EXPECT_FALSE(parse_byte_size("2 parsecs").is_ok());
  EXPECT_FALSE(parse_byte_size("1.2.3").is_ok());
  EXPECT_FALSE(parse_byte_size("0").is_ok());
  EXPECT_FALSE(parse_byte_size("-5").is_ok());
}

TEST(DefaultKvCacheBytes, IsWithinItsBounds) {
  const int64_t b = default_kv_cache_bytes();
  EXPECT_GE(b, int64_t(64) << 20);
  EXPECT_LE(b, int64_t(4) << 30);
}

}  // namespace
}  // namespace omnibus
