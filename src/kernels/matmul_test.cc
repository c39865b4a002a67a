// matmul vs matmul_ref for every weight type, and bitwise batch invariance.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/isa_test_util.h"
#include "kernels/matmul_packed_avx2.h"
#include "kernels/matmul_packed_tuning.h"
#include "kernels/ops_parallel.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"
#include "util/huge_page_allocator.h"

namespace omnibus {
namespace {

using quant_testing::random_floats;
using quant_testing::random_rows;

int64_t n_in_for(DType t, int k) {
  const int64_t bs = dtype_traits_ref(t).block_size;
  return bs == 1 ? 32 * k + 8 : bs * k;
}

// Tolerance per output: the AVX2 paths differ from the reference only in the
// order of float sums: |diff| <= 2e-6 * sum_k |W[r,k] x[t,k]| (dequantized W, f32 x,
// which bounds the quantized-activation sum to within a few percent).
void expect_matches_ref(const WeightView& w, const std::vector<float>& x, int64_t n_tok,
                        const std::vector<float>& got) {
  std::vector<float> want(size_t(n_tok * w.n_out));
  matmul_ref(w, x.data(), n_tok, want.data());
  std::vector<float> fw(size_t(w.n_in * w.n_out));
  dtype_traits_ref(w.type).to_float(w.data, fw.data(), w.n_in * w.n_out);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x.data() + t * w.n_in;
    for (int64_t r = 0; r < w.n_out; ++r) {
      const float* wr =
          fw.data() + r * w.n_in;  // raw pointers: this file is built at -O0 under ASan
      double l1 = 0;
      for (int64_t k = 0; k < w.n_in; ++k) l1 += std::fabs(double(wr[k]) * xt[k]);
      const size_t i = size_t(t * w.n_out + r);
      ASSERT_NEAR(got[i], want[i], 2.2e-6 * l1 + 1e-30) << "t=" << t << " r=" << r;
    }
  }
}

// Every y[t, r] bitwise the table's vec_dot of row r with token t quantized
// to the weight's vec_dot type.
void expect_equals_vec_dot(const WeightView& w, const std::vector<float>& x, int64_t n_tok,
                           const std::vector<float>& y) {
  const DTypeTraits& wt = dtype_traits(w.type);
  const DTypeTraits& at = dtype_traits(wt.vec_dot_type);
  const size_t w_row = dtype_row_size(w.type, w.n_in);
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  std::vector<uint8_t> qa(dtype_row_size(at.type, w.n_in));
  for (int64_t t = 0; t < n_tok; ++t) {
    at.from_float(x.data() + t * w.n_in, qa.data(), w.n_in);
    for (int64_t r = 0; r < w.n_out; ++r) {
      const float want = wt.vec_dot(w.n_in, wdata + r * w_row, qa.data());
      ASSERT_EQ(std::memcmp(&want, &y[size_t(t * w.n_out + r)], 4), 0) << "t=" << t << " r=" << r;
    }
  }
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesReference) {
  const DType type = GetParam();
  std::mt19937 rng(11);
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (int k : {1, 3}) {
    for (int64_t n_out : {1, 7, 33}) {
      const int64_t n_in = n_in_for(type, k);
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      const WeightView w{type, wdata.data(), n_in, n_out};
      for (int64_t n_tok : {1, 2, 3, 5, 8, 12, 17, 64}) {  // 12: 3 tiles
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << n_in
                                          << " n_out=" << n_out << " n_tok=" << n_tok);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        std::vector<float> y(size_t(n_tok * n_out), NAN);
        matmul(w, x.data(), n_tok, y.data(), pool, scratch);
        expect_matches_ref(w, x, n_tok, y);
      }
    }
  }
}

// y[t] computed alone, with 36 other tokens, at another offset, with 1 or 3
// threads: bitwise the same.
TEST_P(MatmulTest, BatchInvariant) {
  const DType type = GetParam();
  std::mt19937 rng(12);
  const int64_t n_in = n_in_for(type, 3), n_out = 45, n_tok = 37;
  std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
  const WeightView w{type, wdata.data(), n_in, n_out};
  std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
  ThreadPool pool2(2), pool1(1), pool3(3);
  MatmulScratch scratch;

  std::vector<float> all(size_t(n_tok * n_out));
  matmul(w, x.data(), n_tok, all.data(), pool2, scratch);
  std::vector<float> one(static_cast<size_t>(n_out));
  for (int64_t t = 0; t < n_tok; ++t) {
    matmul(w, x.data() + t * n_in, 1, one.data(), t % 2 ? pool1 : pool3, scratch);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + t * n_out, size_t(n_out) * 4), 0) << "t=" << t;
  }
  // tokens 5..19 as their own batch (different tile boundaries)
  std::vector<float> mid(size_t(15 * n_out));
  matmul(w, x.data() + 5 * n_in, 15, mid.data(), pool3, scratch);
  ASSERT_EQ(std::memcmp(mid.data(), all.data() + 5 * n_out, mid.size() * 4), 0);
  // the first rows of W as their own matrix (different row tiles)
  const WeightView w_top{type, wdata.data(), n_in, 7};
  std::vector<float> top(size_t(n_tok * 7));
  matmul(w_top, x.data(), n_tok, top.data(), pool2, scratch);
  for (int64_t t = 0; t < n_tok; ++t) {
    ASSERT_EQ(std::memcmp(top.data() + t * 7, all.data() + t * n_out, 7 * 4), 0) << "t=" << t;
  }
  // a batch of more tokens than one call runs (512: it runs as calls of 512)
  // equals the same tokens in calls of at most 300, one token, and 1..n_big
  const int64_t n_big = 1100;
  std::vector<float> xb = random_floats(size_t(n_big * n_in), rng);
  std::vector<float> big(size_t(n_big * n_out), NAN), parts(big.size(), -1.0f);
  matmul(w, xb.data(), n_big, big.data(), pool2, scratch);
  for (int64_t t0 = 0; t0 < n_big; t0 += 300) {
    matmul(w, xb.data() + t0 * n_in, std::min<int64_t>(300, n_big - t0), parts.data() + t0 * n_out,
           pool3, scratch);
  }
  ASSERT_EQ(std::memcmp(big.data(), parts.data(), big.size() * 4), 0);
  for (int64_t t : {int64_t(0), int64_t(511), int64_t(512), int64_t(1024), n_big - 1}) {
    matmul(w, xb.data() + t * n_in, 1, one.data(), pool2, scratch);
    ASSERT_EQ(std::memcmp(one.data(), big.data() + t * n_out, size_t(n_out) * 4), 0) << "t=" << t;
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, MatmulTest,
                         ::testing::ValuesIn(quant_testing::weight_types()),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

// The packed layout is only a speed choice: bitwise the same y as the view.
TEST_P(MatmulTest, PackedEqualsUnpacked) {
  const DType type = GetParam();
  std::mt19937 rng(13);
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (int64_t n_out : {1, 8, 13, 61}) {
    const int64_t n_in = n_in_for(type, 3);
    std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
    const WeightView w{type, wdata.data(), n_in, n_out};
    const PackedWeight p = pack_weight(w, n_out > 8 ? &pool : nullptr);
    EXPECT_EQ(p.view().data, w.data);
    for (int64_t n_tok : {1, 3, 4, 9}) {
      SCOPED_TRACE(::testing::Message() << "n_out=" << n_out << " n_tok=" << n_tok);
      std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
      std::vector<float> y0(size_t(n_tok * n_out), NAN), y1(size_t(n_tok * n_out), -1.0f);
      matmul(w, x.data(), n_tok, y0.data(), pool, scratch);
      matmul(p, x.data(), n_tok, y1.data(), pool, scratch);
      ASSERT_EQ(std::memcmp(y0.data(), y1.data(), y0.size() * 4), 0);
    }
  }
}

// Every output of matmul is the table's (fastest) vec_dot of the same rows,
// bitwise: one definition of each output's arithmetic across all paths.
TEST_P(MatmulTest, EqualsVecDot) {
  const DType type = GetParam();
  std::mt19937 rng(14);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const int64_t n_in = n_in_for(type, 5), n_out = 19, n_tok = 6;
  std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
  const WeightView w{type, wdata.data(), n_in, n_out};
  std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
  std::vector<float> y(size_t(n_tok * n_out));
  matmul(w, x.data(), n_tok, y.data(), pool, scratch);
  expect_equals_vec_dot(w, x, n_tok, y);
}

// Several matrices sharing the input (q/k/v, gate/up): each output bitwise
// what its own matmul gives, across odd row counts, token counts and threads.
TEST_P(MatmulTest, SharedInputEqualsSeparate) {
  const DType type = GetParam();
  std::mt19937 rng(14);
  const int64_t n_in = n_in_for(type, 3);
  const int64_t n_outs[3] = {7, 33, 16};
  std::vector<std::vector<uint8_t>> wdata;
  std::vector<PackedWeight> packed;
  for (int64_t n_out : n_outs) {
    wdata.push_back(random_rows(type, n_out, n_in, rng));
    packed.push_back(pack_weight(WeightView{type, wdata.back().data(), n_in, n_out}));
  }
  const PackedWeight* ws[3] = {&packed[0], &packed[1], &packed[2]};
  ThreadPool pool2(2), pool3(3);
  MatmulScratch scratch;
  for (int64_t n_tok : {1, 5, 13, 1100}) {  // 1100: calls of 512, 512, 76
    SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_tok=" << n_tok);
    std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
    std::vector<std::vector<float>> fused(3), alone(3);
    float* ys[3];
    for (int m = 0; m < 3; ++m) {
      fused[size_t(m)].assign(size_t(n_tok * n_outs[m]), NAN);
      alone[size_t(m)].assign(size_t(n_tok * n_outs[m]), -1.0f);
      ys[m] = fused[size_t(m)].data();
    }
    matmul_shared_input(ws, x.data(), n_tok, ys, n_tok % 2 ? pool3 : pool2, scratch);
    for (int m = 0; m < 3; ++m) {
      matmul(packed[size_t(m)], x.data(), n_tok, alone[size_t(m)].data(), pool2, scratch);
      ASSERT_EQ(std::memcmp(fused[size_t(m)].data(), alone[size_t(m)].data(),
                            fused[size_t(m)].size() * 4),
                0)
          << "m=" << m;
    }
  }
}

// A gated FFN's down projection with the activation computed while the
// input is quantized: bitwise swiglu / geglu written out, then matmul; for
// the formats without a packed kernel (the fallback computes it in place).
TEST_P(MatmulTest, GatedEqualsActivationThenMatmul) {
  const DType type = GetParam();
  std::mt19937 rng(16);
  const int64_t n_in = n_in_for(type, 3), n_out = 21;
  std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
  const PackedWeight packed = pack_weight(WeightView{type, wdata.data(), n_in, n_out});
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (int64_t n_tok : {1, 5, 13, 70, 1100}) {  // 1100: calls of 512, 512, 76
    for (GatedAct act : {GatedAct::kSwiglu, GatedAct::kGeglu}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_tok=" << n_tok
                                        << " geglu=" << (act == GatedAct::kGeglu));
      const std::vector<float> gate = random_floats(size_t(n_tok * n_in), rng);
      const std::vector<float> up = random_floats(size_t(n_tok * n_in), rng);
      std::vector<float> h = gate, g = gate;
      if (act == GatedAct::kSwiglu) {
        swiglu(h.data(), up.data(), h.data(), n_tok, n_in, pool);
      } else {
        geglu(h.data(), up.data(), h.data(), n_tok, n_in, pool);
      }
      std::vector<float> want(size_t(n_tok * n_out), NAN), got(want.size(), -1.0f);
      matmul(packed, h.data(), n_tok, want.data(), pool, scratch);
      matmul_gated(packed, act, g.data(), up.data(), n_tok, got.data(), pool, scratch);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
    }
  }
}

// Matrices of different types share an input too (no fused job then).
TEST(Matmul, SharedInputMixedTypes) {
  std::mt19937 rng(15);
  const int64_t n_in = 64;
  std::vector<uint8_t> a = random_rows(DType::Q4_1, 9, n_in, rng),
                       b = random_rows(DType::Q8_0, 5, n_in, rng);
  const PackedWeight pa = pack_weight(WeightView{DType::Q4_1, a.data(), n_in, 9});
  const PackedWeight pb = pack_weight(WeightView{DType::Q8_0, b.data(), n_in, 5});
  const PackedWeight* ws[2] = {&pa, &pb};
  ThreadPool pool(2);
  MatmulScratch scratch;
  const int64_t n_tok = 6;
  std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
  std::vector<float> ya(size_t(n_tok * 9)), yb(size_t(n_tok * 5)), wa(ya.size()), wb(yb.size());
  float* ys[2] = {ya.data(), yb.data()};
  matmul_shared_input(ws, x.data(), n_tok, ys, pool, scratch);
  matmul(pa, x.data(), n_tok, wa.data(), pool, scratch);
  matmul(pb, x.data(), n_tok, wb.data(), pool, scratch);
  EXPECT_EQ(std::memcmp(ya.data(), wa.data(), ya.size() * 4), 0);
  EXPECT_EQ(std::memcmp(yb.data(), wb.data(), yb.size() * 4), 0);
}

// Extreme quants (all 15 nibbles, Q5_0's, Q5_1's and Q5_K's 31, Q4_K's and Q5_K's scale 63,
// Q6_K's 63 at scale -128, Q8_0 at -128, against +-127 activations):
// the packed kernels' int16 partial sums must not overflow.
// Packed weights under 2 MiB share huge-page chunks (kernels/matmul.cc,
// alloc_packed): each is 64-byte aligned, none overlaps another, and one
// outlives the others' release (ASan would see a use after free); a large one
// gets its own allocation. Results as the row-major view's.
TEST(Matmul, SmallPackedWeightsShareChunksSafely) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "the scalar tier packs no weights";
  std::mt19937 rng(19);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const int64_t n_in = 256, n_out = 40;
  std::vector<std::vector<uint8_t>> rows;
  std::vector<PackedWeight> packed;
  for (int i = 0; i < 6; ++i) {
    rows.push_back(random_rows(DType::Q4_K, n_out, n_in, rng));
    packed.push_back(pack_weight(WeightView{DType::Q4_K, rows.back().data(), n_in, n_out}));
    ASSERT_TRUE(packed.back().is_packed());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(packed.back().data()) % 64, 0u);
  }
  for (size_t i = 0; i < packed.size(); ++i) {
    for (size_t j = i + 1; j < packed.size(); ++j) {
      const uint8_t *a = packed[i].data(), *b = packed[j].data();
      EXPECT_TRUE(a + packed[i].size_bytes() <= b || b + packed[j].size_bytes() <= a);
    }
  }
  const int64_t big_in = 512, big_out = 8 * 1024;  // 1024 groups x 2368 bytes: over 2 MiB
  std::vector<uint8_t> big_rows = random_rows(DType::Q4_K, big_out, big_in, rng);
  PackedWeight big = pack_weight(WeightView{DType::Q4_K, big_rows.data(), big_in, big_out});
  EXPECT_GT(big.size_bytes(), size_t(2) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % (size_t(2) << 20), 0u);
  for (size_t i = 0; i + 1 < packed.size(); ++i) packed[i] = PackedWeight();  // release all but one
  std::vector<float> x = random_floats(size_t(3 * n_in), rng);
  std::vector<float> got(size_t(3 * n_out)), want(got.size());
  matmul(packed.back(), x.data(), 3, got.data(), pool, scratch);
  matmul(packed.back().view(), x.data(), 3, want.data(), pool, scratch);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
}

TEST(Matmul, PackedExtremeQuantsAreExact) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  const int64_t n_out = 41;  // 6 groups: runs of two (paired kernels) and one
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                     DType::Q5_K, DType::Q6_K}) {
    const bool k_quant = type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K;
    const int64_t n_in = k_quant ? 512 : 64;
    std::vector<float> x(static_cast<size_t>(n_in));
    for (int64_t k = 0; k < n_in; ++k) x[size_t(k)] = k % 3 == 0 ? -1.0f : 1.0f;
    // Q4_0 / Q4_1 all 15, Q5_0 / Q5_1 / Q5_K all fifth bits and nibbles set (u = 31), Q4_K all 15
    // with scales and mins 63, Q6_K all 63 (value 31) with scales -128, Q8_0 all -128
    std::vector<uint8_t> wdata(dtype_row_size(type, n_in) * n_out);
    for (size_t i = 0; i < wdata.size(); ++i) wdata[i] = type == DType::Q8_0 ? 0x80 : 0xFF;
    // scales: d = 1.0 (0x3C00), m / dmin = 0
    const size_t bs = dtype_traits_ref(type).type_size;
    for (size_t b = 0; b < wdata.size() / bs; ++b) {
      wdata[b * bs] = 0x00;
      wdata[b * bs + 1] = 0x3C;
      if (type == DType::Q4_1 || type == DType::Q5_1 || type == DType::Q4_K ||
          type == DType::Q5_K) {
        wdata[b * bs + 2] = wdata[b * bs + 3] = 0;
      }
      if (type == DType::Q6_K) {  // scales at 192, d last
        std::fill_n(wdata.begin() + ptrdiff_t(b * bs), 192, uint8_t(0xFF));
        std::fill_n(wdata.begin() + ptrdiff_t(b * bs + 192), 16, uint8_t(0x80));
        wdata[b * bs + 208] = 0x00;
        wdata[b * bs + 209] = 0x3C;
      }
    }
    const WeightView w{type, wdata.data(), n_in, n_out};
    std::vector<float> got(static_cast<size_t>(n_out)), want(static_cast<size_t>(n_out));
    matmul(w, x.data(), 1, got.data(), pool, scratch);
    matmul_ref(w, x.data(), 1, want.data());
    for (int64_t r = 0; r < n_out; ++r)
      EXPECT_FLOAT_EQ(got[size_t(r)], want[size_t(r)]) << dtype_name(type);
    // many tokens: the multi-tile kernels (pre-split nibbles, wide token tiles)
    const int64_t n_tok = 13;
    std::vector<float> xs(size_t(n_tok * n_in));
    for (int64_t t = 0; t < n_tok; ++t) std::copy(x.begin(), x.end(), xs.begin() + t * n_in);
    std::vector<float> ys(size_t(n_tok * n_out));
    matmul(w, xs.data(), n_tok, ys.data(), pool, scratch);
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t r = 0; r < n_out; ++r) {
        EXPECT_FLOAT_EQ(ys[size_t(t * n_out + r)], want[size_t(r)])
            << dtype_name(type) << " t=" << t;
      }
    }
  }
}

// Many tokens run two 8-row groups per kernel call where a thread's run of
// groups allows (every packed type but Q8_0 at one tile); single tokens run one group at a time.
// Every output bitwise the same either way, for several thread counts and odd row, block and token
// counts; and close to the reference.
TEST(Matmul, GroupPairsEqualSingleGroups) {
  std::mt19937 rng(16);
  ThreadPool pool1(1), pool2(2), pool3(3);
  ThreadPool* pools[3] = {&pool1, &pool2, &pool3};
  MatmulScratch scratch;
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                     DType::Q5_K, DType::Q6_K}) {
    for (int64_t n_in : {96, 160}) {
      if (type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K)
        n_in *= 8;  // 3 and 5 super-blocks
      const int64_t n_out = 8 * 37 + 5;
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      const WeightView w{type, wdata.data(), n_in, n_out};
      const PackedWeight packed = pack_weight(w);
      for (int64_t n_tok : {2, 13, 64, 130}) {  // 130: token chunks of 16, 16 and 1 tiles
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << n_in
                                          << " n_out=" << n_out << " n_tok=" << n_tok);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        std::vector<float> all(size_t(n_tok * n_out), NAN);
        matmul(packed, x.data(), n_tok, all.data(), *pools[n_tok % 3], scratch);
        expect_matches_ref(w, x, n_tok, all);
        std::vector<float> viewed(all.size(), NAN);
        matmul(w, x.data(), n_tok, viewed.data(), *pools[(n_tok + 1) % 3], scratch);
        ASSERT_EQ(std::memcmp(viewed.data(), all.data(), all.size() * 4), 0);
        std::vector<float> one(static_cast<size_t>(n_out));
        for (int64_t t = 0; t < n_tok; ++t) {
          matmul(packed, x.data() + t * n_in, 1, one.data(), *pools[t % 3], scratch);
          ASSERT_EQ(std::memcmp(one.data(), all.data() + t * n_out, size_t(n_out) * 4), 0)
              << "t=" << t;
        }
      }
    }
  }
}

// Steps of 2..8 tokens (a speculative verification of 1 + k tokens) take the
// one-pass wide kernels where the tier has them (avx512: every packed type),
// and steps of 9..64 slices of them (on amx, the K-quants take the tile unit
// instead): every token count to 8, slices of odd and even tile
// counts, and of 16 tokens (the avx512 Q6_K) next to pairs, whole chunks of
// them, a partial last tile after them; odd group and block counts (a lone
// last group, Q8_0's half pair) and a short last group, 1 and 2 threads; each
// token's outputs bitwise those of its one-token call, and close to the
// reference. The one-token calls run both ways a CPU may take them (the
// two-group wide kernels and the single-group ones). The tier tests hold the
// same across tiers.
TEST(Matmul, FewTokenStepsEqualOneTokenSteps) {
  std::mt19937 rng(18);
  ThreadPool pool1(1), pool2(2);
  MatmulScratch scratch;
  const bool start_pairs =
      cpu_features().use_avx2() ? matmul_packed::set_one_token_pairs_for_testing(false) : false;
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q4_1, DType::Q8_0, DType::Q4_0,
                     DType::Q5_0, DType::Q5_1}) {
    const bool k_quant = type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K;
    const int64_t n_in = k_quant ? 3 * 256 : 7 * 32;
    for (int64_t n_out : {16 * 5 + 3, 8 * 7}) {
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      const WeightView w{type, wdata.data(), n_in, n_out};
      const PackedWeight packed = pack_weight(w);
      for (int64_t n_tok : {2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 21, 24, 62, 64, 66, 71, 80, 100, 133}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(type) << " n_out=" << n_out << " n_tok=" << n_tok);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        std::vector<float> all(size_t(n_tok * n_out), NAN);
        matmul(packed, x.data(), n_tok, all.data(), n_tok % 2 ? pool1 : pool2, scratch);
        expect_matches_ref(w, x, n_tok, all);
        std::vector<float> one(static_cast<size_t>(n_out), NAN);
        for (bool pairs : {false, true}) {
          if (cpu_features().use_avx2()) matmul_packed::set_one_token_pairs_for_testing(pairs);
          for (int64_t t = 0; t < n_tok; ++t) {
            matmul(packed, x.data() + t * n_in, 1, one.data(), pool2, scratch);
            ASSERT_EQ(std::memcmp(one.data(), all.data() + t * n_out, size_t(n_out) * 4), 0)
                << "t=" << t << " one-token pairs " << pairs;
          }
        }
      }
    }
  }
  if (cpu_features().use_avx2()) matmul_packed::set_one_token_pairs_for_testing(start_pairs);
}

// The unquantized formats at row lengths that leave a scalar tail (n_in % 8
// != 0, and shorter than one vector): every output bitwise the table's
// vec_dot, whatever the tile or layout (row-major or packed at load), and
// close to the reference.
TEST(Matmul, FloatTypesOddRowLengths) {
  std::mt19937 rng(17);
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (DType type : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t n_in : {1, 7, 13, 37}) {
      const int64_t n_out = 11;
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      const WeightView w{type, wdata.data(), n_in, n_out};
      const PackedWeight packed = pack_weight(w);
      EXPECT_EQ(packed.is_packed(), cpu_features().use_avx2());
      for (int64_t n_tok : {1, 6, 70}) {  // 70: two token chunks
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << n_in
                                          << " n_out=" << n_out << " n_tok=" << n_tok);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        std::vector<float> y(size_t(n_tok * n_out), NAN);
        matmul(w, x.data(), n_tok, y.data(), pool, scratch);
        expect_matches_ref(w, x, n_tok, y);
        std::vector<float> yp(y.size(), NAN);
        matmul(packed, x.data(), n_tok, yp.data(), pool, scratch);
        ASSERT_EQ(std::memcmp(y.data(), yp.data(), y.size() * 4), 0);
        expect_equals_vec_dot(w, x, n_tok, y);
      }
    }
  }
}

TEST(Matmul, EmptyShapesAreNoOps) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<uint8_t> wdata(dtype_row_size(DType::Q4_1, 64));
  const WeightView w{DType::Q4_1, wdata.data(), 64, 1};
  float y = 42.0f;
  matmul(w, nullptr, 0, &y, pool, scratch);
  EXPECT_EQ(y, 42.0f);
  // Rows of no elements: every output is an empty sum, at any token count
  // (the amx tier's many-token kernels never see a call without super-blocks).
  for (DType type : {DType::Q4_K, DType::Q6_K, DType::Q8_0}) {
    const WeightView empty_rows{type, wdata.data(), 0, 19};
    for (int64_t n_tok : {1, 7, 40}) {
      std::vector<float> x(1, 1.0f), ys(size_t(n_tok * 19), NAN);
      matmul(empty_rows, x.data(), n_tok, ys.data(), pool, scratch);
      for (float v : ys) ASSERT_EQ(v, 0.0f) << dtype_name(type) << " n_tok=" << n_tok;
    }
  }
}

}  // namespace
}  // namespace omnibus

namespace omnibus {
namespace {

using isa_testing::tiers_above_avx2;

// The avx2 tier's y = w x (packed): what the tier comparisons hold the others to.
std::vector<float> avx2_y(const PackedWeight& packed, const std::vector<float>& x, int64_t n_tok,
                          int64_t n_out, ThreadPool& pool, MatmulScratch& scratch) {
  set_isa_for_testing(Isa::kAvx2);
  std::vector<float> y(size_t(n_tok * n_out), NAN);
  matmul(packed, x.data(), n_tok, y.data(), pool, scratch);
  return y;
}

// At each of `tiers`, w (packed at load, and as in the file) times x gives
// `want` bit for bit.
void expect_tiers_give(const std::vector<Isa>& tiers, const WeightView& w,
                       const PackedWeight& packed, const std::vector<float>& x, int64_t n_tok,
                       const std::vector<float>& want, ThreadPool& pool, MatmulScratch& scratch) {
  for (Isa tier : tiers) {
    set_isa_for_testing(tier);
    SCOPED_TRACE(isa_name(tier));
    // (64-byte aligned, as the engine's activation buffers: the amx tier
    // writes whole 64-byte strips of such rows with streaming stores)
    std::vector<float, HugePageAllocator<float>> got(want.size(), NAN), viewed(want.size(), NAN);
    matmul(packed, x.data(), n_tok, got.data(), pool, scratch);
    matmul(w, x.data(), n_tok, viewed.data(), pool, scratch);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
    ASSERT_EQ(std::memcmp(viewed.data(), want.data(), want.size() * 4), 0);
  }
}

// Every ISA tier's packed kernels give bitwise the avx2 tier's y (exact int32
// sums in one order, kernels/cpu_features.h): one token (the per-group
// kernels), several tiles (pairs, unpacked groups), packed at load and on the
// fly, odd row and block counts, and extreme quants (int16 limits of avx2).
TEST(Matmul, IsaTiersAreBitwiseEqual) {
  std::vector<Isa> tiers;
  if (const std::string why = tiers_above_avx2(&tiers); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 rng(21);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const Isa start = isa();
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                     DType::Q5_K, DType::Q6_K}) {
    const bool k_quant = type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K;
    for (int extreme = 0; extreme < 2; ++extreme) {
      const int64_t n_in = k_quant ? 768 : 160, n_out = 8 * 5 + 3;
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      if (extreme) {  // every quant byte at its largest magnitude (scales stay random)
        const size_t bs = dtype_traits_ref(type).type_size;
        for (size_t b = 0; b < wdata.size() / bs; ++b) {
          const size_t skip =
              type == DType::Q6_K ? 0 : (type == DType::Q4_K || type == DType::Q5_K ? 16 : 4);
          const size_t end = type == DType::Q6_K ? 192 : bs;  // Q6_K: ql and qh, not scales and d
          for (size_t i = skip; i < end; ++i) wdata[b * bs + i] = type == DType::Q8_0 ? 0x80 : 0xFF;
        }
      }
      const WeightView w{type, wdata.data(), n_in, n_out};
      set_isa_for_testing(Isa::kAvx2);
      const PackedWeight packed = pack_weight(w);
      // 6, 7: two tiles on packed groups; 9, 12, 13, 21, 64: slices of wide
      // kernels where the tier has them (an odd tile count: a first slice of
      // one tile), else unpacked; 65, 100: unpacked (amx: 16-token calls, a
      // last one of 13 / 4 tokens, a chunk boundary at 64)
      for (int64_t n_tok : {1, 3, 6, 7, 9, 12, 13, 21, 64, 65, 100}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(type) << " n_tok=" << n_tok << " extreme=" << extreme);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        if (extreme) {
          for (float& v : x) v = v < 0 ? -1.0f : 1.0f;  // activations quantize to +-127
        }
        const std::vector<float> want = avx2_y(packed, x, n_tok, n_out, pool, scratch);
        expect_tiers_give(tiers, w, packed, x, n_tok, want, pool, scratch);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  set_isa_for_testing(start);
}

// The K-quants at a prompt's shape: long rows (57 super-blocks: on the amx
// tier one call of all the tokens, several 32-token units), a last pair with
// 3 valid rows, and token counts that leave a last unit of 1..31 tokens; and
// short rows (3 super-blocks) at 300 and 529 tokens (calls of at most
// kAmxCallTok = 512 tokens: two chunks, the second's one unit of 17 tokens,
// and a last unit of 12). 43 outputs (rows of 172 bytes: on the amx tier a
// quad of groups, then a pair with 3 valid rows), 48 (every pair whole, rows
// 64-byte aligned: the amx tier streams calls of 64 tokens and more to them,
// and writes the shorter ones as the others) and 59 (two quads, the second
// with 3 valid rows in its last group).
TEST(Matmul, ManyTokenKQuantsIsaTiersAreBitwiseEqual) {
  std::vector<Isa> tiers;
  if (const std::string why = tiers_above_avx2(&tiers); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 rng(29);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const Isa start = isa();
  struct Shape {
    int64_t n_in;
    std::vector<int64_t> n_toks;
  };
  for (const Shape& shape : {Shape{256 * 57, {17, 33, 100, 161}}, Shape{256 * 3, {300, 529}}}) {
    const int64_t n_in = shape.n_in;
    for (const auto& [type, n_out] : {std::pair{DType::Q4_K, 43},
                                      {DType::Q5_K, 43},
                                      {DType::Q6_K, 43},
                                      {DType::Q4_K, 48},
                                      {DType::Q5_K, 48},
                                      {DType::Q6_K, 48},
                                      {DType::Q4_K, 59},
                                      {DType::Q5_K, 59},
                                      {DType::Q6_K, 59}}) {
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      const WeightView w{type, wdata.data(), n_in, n_out};
      set_isa_for_testing(Isa::kAvx2);
      const PackedWeight packed = pack_weight(w);
      for (int64_t n_tok : shape.n_toks) {
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << n_in
                                          << " n_out=" << n_out << " n_tok=" << n_tok);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        const std::vector<float> want = avx2_y(packed, x, n_tok, n_out, pool, scratch);
        expect_tiers_give(tiers, w, packed, x, n_tok, want, pool, scratch);
        if (::testing::Test::HasFatalFailure()) break;
      }
    }
  }
  set_isa_for_testing(start);
}

// The unquantized formats: every tier above avx2 (avx512's row-pair zmm
// tiles) gives bitwise the avx2 tier's y, packed and row-major, at token
// counts that leave every remainder of its 6-token tiles, with and without a
// scalar tail, and a last group of fewer than 8 rows.
TEST(Matmul, FloatTypesIsaTiersAreBitwiseEqual) {
  std::vector<Isa> tiers;
  if (const std::string why = tiers_above_avx2(&tiers); !why.empty()) GTEST_SKIP() << why;
  std::mt19937 rng(23);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const Isa start = isa();
  for (DType type : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t n_in : {5, 165, 384}) {
      const int64_t n_out = 8 * 6 + 5;
      std::vector<uint8_t> wdata = random_rows(type, n_out, n_in, rng);
      const WeightView w{type, wdata.data(), n_in, n_out};
      const PackedWeight packed = pack_weight(w);
      for (int64_t n_tok : {1, 2, 5, 6, 7, 11, 13, 64, 71}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_in=" << n_in
                                          << " n_out=" << n_out << " n_tok=" << n_tok);
        std::vector<float> x = random_floats(size_t(n_tok * n_in), rng);
        const std::vector<float> want = avx2_y(packed, x, n_tok, n_out, pool, scratch);
        expect_equals_vec_dot(w, x, n_tok, want);
        expect_tiers_give(tiers, w, packed, x, n_tok, want, pool, scratch);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  set_isa_for_testing(start);
}

}  // namespace
}  // namespace omnibus
