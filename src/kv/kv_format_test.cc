#include "kv/kv_format.h"

#include <gtest/gtest.h>

#include <string>

namespace omnibus {
namespace {

constexpr KvFormat kAll[] = {KvFormat::kF32, KvFormat::kF16, KvFormat::kQ8, KvFormat::kQ4,
                             KvFormat::kKivi2};

TEST(KvFormat, ParsesEveryName) {
  for (const char* name : {"f32", "f16", "q8", "q4", "kivi2"}) {
    StatusOr<KvFormat> f = parse_kv_format(name);
    ASSERT_TRUE(f.is_ok()) << name;
    EXPECT_EQ(kv_format_name(*f), name);
  }
  // Weight dtype names are not KV formats.
  for (const char* name : {"q8_0", "q4_1", "q2_k", "int2", ""}) {
    StatusOr<KvFormat> f = parse_kv_format(name);
    ASSERT_FALSE(f.is_ok()) << name;
    EXPECT_NE(f.status().message().find("choices"), std::string::npos);
  }
}

TEST(KvFormat, Traits) {
  for (KvFormat f : kAll) {
    const bool kivi = f == KvFormat::kQ4 || f == KvFormat::kKivi2;
    EXPECT_EQ(kv_has_residual(f), kivi) << kv_format_name(f);
    EXPECT_EQ(kv_format_quantized(f), f != KvFormat::kF32 && f != KvFormat::kF16)
        << kv_format_name(f);
    EXPECT_EQ(kv_rotates_v(f), f == KvFormat::kKivi2) << kv_format_name(f);
  }
  EXPECT_EQ(kv_kivi_bits(KvFormat::kKivi2), 2);
  EXPECT_EQ(kv_kivi_bits(KvFormat::kQ4), 4);
  EXPECT_EQ(kv_kivi_bits(KvFormat::kQ8), 0);
  EXPECT_EQ(kv_default_residual_blocks(KvFormat::kKivi2), 1);
  EXPECT_EQ(kv_default_residual_blocks(KvFormat::kQ4), 0);
  EXPECT_EQ(kv_default_residual_blocks(KvFormat::kF16), 0);
}

TEST(KvFormat, HeadDimSupport) {
  for (KvFormat f : kAll) {
    EXPECT_FALSE(kv_format_supports_head_dim(f, 0));
    EXPECT_TRUE(kv_format_supports_head_dim(f, 64));
  }
  EXPECT_TRUE(kv_format_supports_head_dim(KvFormat::kQ8, 7));
  EXPECT_FALSE(kv_format_supports_head_dim(KvFormat::kQ4, 7));
  EXPECT_TRUE(kv_format_supports_head_dim(KvFormat::kQ4, 6));
  EXPECT_FALSE(kv_format_supports_head_dim(KvFormat::kKivi2, 6));
  EXPECT_TRUE(kv_format_supports_head_dim(KvFormat::kKivi2, 12));
}

TEST(KvFormat, UnitBytes) {
  EXPECT_EQ(kv_unit_bytes(KvFormat::kF32, 16, 64).k, 16u * 64 * 4);
  EXPECT_EQ(kv_unit_bytes(KvFormat::kF16, 16, 64).v, 16u * 64 * 2);
  EXPECT_EQ(kv_unit_bytes(KvFormat::kQ8, 16, 64).k, 16u * 64 + 16 * 2 * 2);  // a scale per 32
  EXPECT_EQ(kv_unit_bytes(KvFormat::kQ8, 16, 48).k, 16u * 48 + 16 * 2);      // one per row
}

}  // namespace
}  // namespace omnibus
