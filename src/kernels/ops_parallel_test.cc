// Row-parallel kernels (ops_parallel.h) give the same bits as the
// single-thread kernels row by row for any thread count, row count and row
// length, above and below the inline thresholds.
#include "kernels/ops_parallel.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 3.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(OpsParallel, SameBitsAsTheSingleThreadKernels) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n_rows : {1, 2, 7, 64, 129}) {
      for (int64_t n : {576, 1536, 100, 2051}) {  // 100, 2051: rows not a multiple of 8
        const size_t len = size_t(n_rows * n);
        const std::vector<float> a = randn(len, 1), b = randn(len, 2);
        const std::string where = std::to_string(threads) + " threads, " + std::to_string(n_rows) +
                                  " x " + std::to_string(n);
        for (bool gelu_gate : {false, true}) {
          std::vector<float> want(len), got(len);
          for (int64_t r = 0; r < n_rows; ++r) {  // the contract: each row on its own
            const size_t o = size_t(r * n);
            if (gelu_gate) {
              geglu(a.data() + o, b.data() + o, want.data() + o, n);
            } else {
              swiglu(a.data() + o, b.data() + o, want.data() + o, n);
            }
          }
          if (gelu_gate) {
            geglu(a.data(), b.data(), got.data(), n_rows, n, pool);
          } else {
            swiglu(a.data(), b.data(), got.data(), n_rows, n, pool);
          }
          EXPECT_EQ(got, want) << (gelu_gate ? "geglu, " : "swiglu, ") << where;
        }
      }
    }
  }
}

// rms_norm, the residual add and rope, on rows a prompt's size (split from
// kRowOpsParallelMinElems) and a decode's (inline), against one call of the
// single-thread kernel over all the rows.
TEST(OpsParallel, RowOpsSameBitsAsTheSingleThreadKernels) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n_rows : {1, 3, 130, 515}) {
      for (int64_t n : {2048, 2056}) {  // 2056: rows not a multiple of 16
        const size_t len = size_t(n_rows * n);
        const std::vector<float> a = randn(len, 3), b = randn(len, 4), w = randn(size_t(n), 5);
        const std::string where = std::to_string(threads) + " threads, " + std::to_string(n_rows) +
                                  " x " + std::to_string(n);
        std::vector<float> want(len), got(len);
        rms_norm(a.data(), w.data(), want.data(), n_rows, n, 1e-5f);
        rms_norm(a.data(), w.data(), got.data(), n_rows, n, 1e-5f, pool);
        EXPECT_EQ(got, want) << "rms_norm, " << where;
        want = a;
        got = a;
        add_inplace(want.data(), b.data(), int64_t(len));
        add_inplace(got.data(), b.data(), n_rows, n, pool);
        EXPECT_EQ(got, want) << "add_inplace, " << where;
        // heads of 64 (2048 = 32 heads; 2056 = 257 heads of 8), positions
        // from a prompt's middle
        const int head_dim = n % 64 == 0 ? 64 : 8;
        std::vector<int32_t> pos(static_cast<size_t>(n_rows));
        for (size_t t = 0; t < pos.size(); ++t) pos[t] = int32_t(100 + 3 * t);
        for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
          const RopeParams p{.mode = mode, .n_rot = head_dim, .freq_base = 500000.f};
          want = a;
          got = a;
          rope(want.data(), pos.data(), n_rows, int(n / head_dim), head_dim, p);
          rope(got.data(), pos.data(), n_rows, int(n / head_dim), head_dim, p, pool);
          EXPECT_EQ(got, want) << "rope, " << where;
        }
      }
    }
  }
}

TEST(OpsParallel, RowRangesCoverEveryRowOnce) {
  ThreadPool pool(3);
  for (int64_t n_rows : {0, 1, 2, 3, 5, 100}) {
    for (int64_t row_elems : {int64_t(1), kOpsParallelMinElems}) {
      std::vector<int> hits(static_cast<size_t>(n_rows), 0);
      for_row_ranges(n_rows, row_elems, pool, [&](int64_t r0, int64_t r1) {
        ASSERT_LT(r0, r1);
        for (int64_t r = r0; r < r1; ++r) ++hits[size_t(r)];  // ranges are disjoint: no race
      });
      for (int h : hits) EXPECT_EQ(h, 1) << n_rows << " rows";
    }
  }
}

}  // namespace
}  // namespace omnibus
