#include "kv/kv_block_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kv/attention.h"

namespace omnibus {
namespace {

KvGeometry small(KvFormat f) {
  KvGeometry g;
  g.n_layers = 3;
  g.n_kv_heads = 2;
  g.head_dim = 32;
  g.block_size = 4;
  g.format = f;
  return g;
}

// Fills block `b` of every layer with the keys/values of `tokens` random rows.
void fill(KvStorage& kv, int32_t b, std::mt19937& rng) {
  const KvGeometry& g = kv.geometry();
  std::normal_distribution<float> d;
  const size_t row = size_t(g.block_size) * size_t(g.n_kv_heads) * size_t(g.head_dim);
  std::vector<float> k(row), v(row);
  const int32_t table[1] = {b};
  AttentionSeq s{0, g.block_size, 0, table, 0};
  for (int il = 0; il < g.n_layers; ++il) {
    for (float& x : k) x = d(rng);
    for (float& x : v) x = d(rng);
    kv_store(kv.layer(il), &s, 1, k.data(), v.data());
  }
}

TEST(KvBlockIo, ResidualFormatsAreNotCovered) {
  EXPECT_TRUE(kv_block_io_supported(small(KvFormat::kF16)));
  EXPECT_TRUE(kv_block_io_supported(small(KvFormat::kF32)));
  EXPECT_TRUE(kv_block_io_supported(small(KvFormat::kQ8)));
  EXPECT_FALSE(kv_block_io_supported(small(KvFormat::kQ4)));
  EXPECT_FALSE(kv_block_io_supported(small(KvFormat::kKivi2)));
}

class KvBlockIoFormats : public ::testing::TestWithParam<KvFormat> {};

// Gather block 1, scatter it into block 3: the bytes are equal, the payload is
// the size the geometry says, and attention over block 3 is bitwise what it
// is over block 1.
TEST_P(KvBlockIoFormats, RoundTripGivesBitwiseEqualAttention) {
  const KvGeometry g = small(GetParam());
  auto st = KvStorage::create(g, 5);
  ASSERT_TRUE(st.is_ok());
  KvStorage& kv = **st;
  std::mt19937 rng(7);
  fill(kv, 1, rng);
  fill(kv, 2, rng);
  const size_t n = kv_block_payload_bytes(kv);
  EXPECT_EQ(n, g.bytes_per_block());
  std::vector<uint8_t> payload(n), again(n);
  gather_kv_block(kv, 1, payload);
  scatter_kv_block(kv, 3, payload);
  gather_kv_block(kv, 3, again);
  EXPECT_EQ(payload, again);
  std::vector<uint8_t> other(n);
  gather_kv_block(kv, 2, other);
  EXPECT_NE(payload, other);

  const int n_head = 4;
  std::vector<float> q(size_t(n_head) * size_t(g.head_dim));
  std::normal_distribution<float> d;
  for (float& x : q) x = d(rng);
  AttentionParams p{n_head, g.n_kv_heads, g.head_dim, 0.125f};
  for (int il = 0; il < g.n_layers; ++il) {
    std::vector<float> out1(q.size()), out3(q.size());
    const int32_t t1[1] = {1}, t3[1] = {3};
    AttentionSeq s1{0, 1, g.block_size - 1, t1, 0}, s3{0, 1, g.block_size - 1, t3, 0};
    paged_attention_ref(q.data(), kv.layer(il), &s1, 1, p, out1.data());
    paged_attention_ref(q.data(), kv.layer(il), &s3, 1, p, out3.data());
    EXPECT_EQ(0, std::memcmp(out1.data(), out3.data(), out1.size() * sizeof(float)))
        << "layer " << il;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, KvBlockIoFormats,
                         ::testing::Values(KvFormat::kF32, KvFormat::kF16, KvFormat::kQ8));

}  // namespace
}  // namespace omnibus
