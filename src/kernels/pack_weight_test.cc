// pack_weight of small matrices (under 2 MiB: carved from per-thread
// chunks, kernels/matmul.cc) called from several threads at once, as a MoE
// model's loader packs its experts (WeightLoader::packed_row_slices): every
// matrix keeps bytes of its own (no two overlap) and multiplies bitwise as
// its unpacked rows. Run under TSan by the CI (kernels_tests).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

using quant_testing::random_floats;
using quant_testing::random_rows;

TEST(PackWeight, SmallMatricesPackedFromPoolTasksKeepTheirOwnBytes) {
  constexpr int64_t kIn = 256, kTok = 3;
  constexpr int kMatrices = 48;
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> rows;
  std::vector<WeightView> views;
  for (int m = 0; m < kMatrices; ++m) {
    const DType type = m % 2 ? DType::Q6_K : DType::Q4_K;
    const int64_t n_out = 24 + 8 * (m % 5) + m % 3;  // partial groups too
    rows.push_back(random_rows(type, n_out, kIn, rng));
    views.push_back({type, rows.back().data(), kIn, n_out});
  }
  ThreadPool pool(2);
  std::vector<PackedWeight> packed(kMatrices);
  pool.parallel_for(kMatrices,
                    [&](int64_t m, int) { packed[size_t(m)] = pack_weight(views[size_t(m)]); });

  const std::vector<float> x = random_floats(size_t(kTok * kIn), rng);
  MatmulScratch scratch;
  for (int m = 0; m < kMatrices; ++m) {
    const PackedWeight& p = packed[size_t(m)];
    if (!p.is_packed()) GTEST_SKIP() << "no packed kernel on this CPU";
    for (int o = 0; o < kMatrices; ++o) {  // no two matrices share a byte
      const PackedWeight& q = packed[size_t(o)];
      if (o != m) {
        EXPECT_TRUE(p.data() + p.size_bytes() <= q.data() || q.data() + q.size_bytes() <= p.data())
            << m << " and " << o;
      }
    }
    const int64_t n_out = views[size_t(m)].n_out;
    std::vector<float> y(size_t(kTok * n_out)), want(y.size());
    matmul(p, x.data(), kTok, y.data(), pool, scratch);
    matmul(views[size_t(m)], x.data(), kTok, want.data(), pool, scratch);
    EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0) << "matrix " << m;
  }
}

// live_packed_weights lists a packed matrix's exact bytes while it lives
// (moved or not) and drops them with its last owner; the matrices carved
// from one chunk come and go on their own.
TEST(PackWeight, LivePackedWeightsFollowEachMatrixLife) {
  constexpr int64_t kIn = 256;
  std::mt19937 rng(11);
  const std::vector<uint8_t> rows = random_rows(DType::Q4_K, 40, kIn, rng);
  const WeightView view{DType::Q4_K, rows.data(), kIn, 40};
  auto listed = [](const PackedWeight& p) {
    for (const std::span<const uint8_t>& s : live_packed_weights()) {
      if (s.data() == p.data()) return s.size() == p.size_bytes();
    }
    return false;
  };
  PackedWeight a = pack_weight(view);
  if (!a.is_packed()) GTEST_SKIP() << "no packed kernel on this CPU";
  PackedWeight b = pack_weight(view);  // likely the same chunk as a
  EXPECT_TRUE(listed(a));
  EXPECT_TRUE(listed(b));
  const uint8_t* a_data = a.data();
  PackedWeight moved = std::move(a);
  EXPECT_TRUE(listed(moved));
  moved = PackedWeight();  // a's bytes gone; b's chunk share keeps b
  for (const std::span<const uint8_t>& s : live_packed_weights()) EXPECT_NE(s.data(), a_data);
  EXPECT_TRUE(listed(b));
  std::vector<float> y(40), want(40);
  const std::vector<float> x = random_floats(size_t(kIn), rng);
  ThreadPool pool(1);
  MatmulScratch scratch;
  matmul(b, x.data(), 1, y.data(), pool, scratch);  // b's bytes intact after a's release
  matmul(view, x.data(), 1, want.data(), pool, scratch);
  EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace omnibus
