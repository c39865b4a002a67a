#include "kv/block_pool.h"

#include <gtest/gtest.h>

namespace omnibus {
namespace {

TEST(BlockPool, AllocatesInIdOrderThenLruOrder) {
  BlockPool pool(4);
  EXPECT_EQ(pool.n_free(), 4);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.n_free(), 1);
  pool.release(1);
  pool.release(0);
  // Free list now: 3 (never used), 1, 0 — least recently freed first.
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.n_free(), 0);
  pool.check_integrity();
}

TEST(BlockPool, RefCountsKeepSharedBlocksOutOfTheFreeList) {
  BlockPool pool(2);
  const int32_t b = pool.allocate();
  pool.ref(b);
  pool.ref(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  pool.release(b);
  pool.release(b);
  EXPECT_EQ(pool.n_free(), 1);
  pool.check_integrity();
  pool.release(b);
  EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.n_free(), 2);
  pool.check_integrity();
}

TEST(BlockPool, TakeFreeRemovesFromTheMiddle) {
  BlockPool pool(5);
  pool.take_free(2);
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.n_free(), 4);
  pool.check_integrity();
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 3);
  pool.take_free(4);  // the tail
  EXPECT_EQ(pool.n_free(), 0);
  pool.check_integrity();
}

TEST(BlockPoolDeathTest, ReleasingAFreeBlockAborts) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.release(0), "invariant violated");
}

TEST(BlockPoolDeathTest, AllocatingFromAnEmptyPoolAborts) {
  BlockPool pool(1);
  pool.allocate();
  EXPECT_DEATH(pool.allocate(), "invariant violated");
}

}  // namespace
}  // namespace omnibus
