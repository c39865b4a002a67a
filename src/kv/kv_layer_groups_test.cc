#include "kv/kv_layer_groups.h"

#include <gtest/gtest.h>

#include <vector>

namespace omnibus {
namespace {

// Gemma 3's pattern: every `period`-th layer full attention, the rest sliding.
std::vector<bool> pattern(int n_layers, int period) {
  std::vector<bool> swa(static_cast<size_t>(n_layers));
  for (int il = 0; il < n_layers; ++il) swa[size_t(il)] = il % period < period - 1;
  return swa;
}

TEST(KvLayerGroups, UniformIsOneFullGroupWithATensorPerLayer) {
  const KvLayerGroups g = KvLayerGroups::uniform(5);
  EXPECT_FALSE(g.is_hybrid());
  EXPECT_EQ(g.n_groups(), 1);
  EXPECT_EQ(g.n_tensors(), 5);
  for (int il = 0; il < 5; ++il) {
    EXPECT_EQ(g.group_of(il), 0);
    EXPECT_EQ(g.tensor_of(il), il);
  }
  EXPECT_EQ(g.blocks_per_seq(33, 16), 3);
  EXPECT_EQ(g.max_seq_tokens(10, 16), 160);
}

TEST(KvLayerGroups, Gemma3With18LayersMakesSixGroupsOfThree) {
  const KvLayerGroups g = KvLayerGroups::hybrid(pattern(18, 6), 512);
  ASSERT_TRUE(g.is_hybrid());
  EXPECT_EQ(g.n_groups(), 6);
  EXPECT_EQ(g.n_tensors(), 3);
  EXPECT_EQ(g.group(0).layers, (std::vector<int>{5, 11, 17}));
  EXPECT_EQ(g.window(0), 0);
  EXPECT_EQ(g.group(1).layers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(g.group(2).layers, (std::vector<int>{3, 4, 6}));
  EXPECT_EQ(g.group(5).layers, (std::vector<int>{14, 15, 16}));
  for (int gi = 1; gi < 6; ++gi) EXPECT_EQ(g.window(gi), 512);
  // Every layer has exactly one (group, tensor) slot.
  std::vector<int> seen(size_t(6 * 3), 0);
  for (int il = 0; il < 18; ++il) ++seen[size_t(g.group_of(il) * 3 + g.tensor_of(il))];
  for (int n : seen) EXPECT_EQ(n, 1);
  // 4096 tokens: 256 full blocks, and per sliding group the 32 blocks that
  // cover the last token's window [3584, 4095].
  EXPECT_EQ(g.blocks_per_seq(4096, 16), 256 + 5 * 32);
  // Issue 18's bound: <= 30% of the bytes of every layer keeping every token
  // (a block here is 3 layers' worth).
  EXPECT_LE(double(g.blocks_per_seq(4096, 16) * 3), 0.30 * double(256 * 18));
  // Short sequences hold every block in every group.
  EXPECT_EQ(g.blocks_per_seq(512, 16), 6 * 32);
  EXPECT_EQ(g.blocks_per_seq(513, 16), 33 + 5 * 33);
  EXPECT_EQ(g.blocks_per_seq(0, 16), 0);
}

TEST(KvLayerGroups, MaxSeqTokensIsTheLongestThatFits) {
  const KvLayerGroups g = KvLayerGroups::hybrid(pattern(18, 6), 512);
  for (int64_t n_blocks : {1, 6, 191, 192, 300, 1000, 12345}) {
    const int64_t t = g.max_seq_tokens(n_blocks, 16);
    EXPECT_LE(g.blocks_per_seq(t, 16), n_blocks);
    EXPECT_GT(g.blocks_per_seq(t + 1, 16), n_blocks);
  }
}

TEST(KvLayerGroups, ALeftoverSlidingGroupIsPadded) {
  // Gemma 3 1B's shape: 26 layers, full at 5, 11, 17, 23: 22 sliding layers
  // in groups of 4, the last one of 2.
  const KvLayerGroups g = KvLayerGroups::hybrid(pattern(26, 6), 512);
  EXPECT_EQ(g.n_tensors(), 4);
  EXPECT_EQ(g.n_groups(), 1 + 6);
  EXPECT_EQ(g.group(6).layers, (std::vector<int>{24, 25}));
  EXPECT_EQ(g.tensor_of(25), 1);
}

TEST(KvLayerGroups, WithoutBothKindsOfLayersItIsUniform) {
  EXPECT_FALSE(KvLayerGroups::hybrid(std::vector<bool>(4, true), 512).is_hybrid());
  EXPECT_FALSE(KvLayerGroups::hybrid(std::vector<bool>(4, false), 512).is_hybrid());
  EXPECT_FALSE(KvLayerGroups::hybrid(pattern(6, 3), 0).is_hybrid());
  EXPECT_EQ(KvLayerGroups::hybrid(std::vector<bool>(4, true), 512).n_tensors(), 4);
}

}  // namespace
}  // namespace omnibus
