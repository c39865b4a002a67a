// Tests of the dtype table: layouts, reference round trips, and the AVX2
// kernels held against the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/quant_avx2.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_test_util.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

using quant_testing::random_floats;
using quant_testing::random_rows;

TEST(DTypeTable, GeometryMatchesGgml) {
  struct Row {
    DType t;
    const char* name;
    int64_t bs;
    size_t ts;
  };
  const Row rows[] = {
      {DType::F32, "f32", 1, 4},       {DType::F16, "f16", 1, 2},
      {DType::BF16, "bf16", 1, 2},     {DType::Q4_0, "q4_0", 32, 18},
      {DType::Q4_1, "q4_1", 32, 20},   {DType::Q5_0, "q5_0", 32, 22},
      {DType::Q5_1, "q5_1", 32, 24},   {DType::Q8_0, "q8_0", 32, 34},
      {DType::Q8_1, "q8_1", 32, 36},   {DType::Q2_K, "q2_K", 256, 84},
      {DType::Q3_K, "q3_K", 256, 110}, {DType::Q4_K, "q4_K", 256, 144},
      {DType::Q5_K, "q5_K", 256, 176}, {DType::Q6_K, "q6_K", 256, 210},
      {DType::Q8_K, "q8_K", 256, 292},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    ASSERT_TRUE(is_known_dtype(uint32_t(r.t)));
    EXPECT_EQ(dtype_traits_ref(r.t).block_size, r.bs);
    EXPECT_EQ(dtype_traits_ref(r.t).type_size, r.ts);
    EXPECT_EQ(dtype_name(r.t), r.name);
    EXPECT_EQ(dtype_traits(r.t).vec_dot_type, dtype_traits_ref(r.t).vec_dot_type);
    EXPECT_EQ(dtype_row_size(r.t, 512), size_t(512 / r.bs) * r.ts);
  }
  EXPECT_FALSE(is_known_dtype(4));
  EXPECT_FALSE(is_known_dtype(31));
  EXPECT_FALSE(is_known_dtype(1000));
  EXPECT_EQ(dtype_traits_ref(DType::Q4_1).vec_dot_type, DType::Q8_1);
  EXPECT_EQ(dtype_traits_ref(DType::Q5_0).vec_dot_type, DType::Q8_0);
  EXPECT_EQ(dtype_traits_ref(DType::Q6_K).vec_dot_type, DType::Q8_K);
  EXPECT_EQ(dtype_traits_ref(DType::BF16).vec_dot_type, DType::BF16);
}

// Hand-built blocks whose values follow from ggml's layout description.
TEST(QuantRef, Q4_1KnownBlock) {
  BlockQ4_1 b{};
  b.d = fp32_to_fp16(0.5f);
  b.m = fp32_to_fp16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
  float y[32];
  quant_ref::to_float_q4_1(&b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * j - 1.0f);
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 1.0f);
  }
}

TEST(QuantRef, Q5_0FifthBitAndQ4KScales) {
  BlockQ5_0 b{};
  b.d = fp32_to_fp16(1.0f);
  const uint32_t qh = 0x80000001u;  // element 0 and element 31 have bit 4 set
  std::memcpy(b.qh, &qh, 4);
  b.qs[0] = 0x03;   // element 0 low = 3, element 16 low = 0
  b.qs[15] = 0x70;  // element 15 low = 0, element 31 low = 7
  float y[32];
  quant_ref::to_float_q5_0(&b, y, 32);
  EXPECT_EQ(y[0], 3 + 16 - 16);
  EXPECT_EQ(y[16], -16);
  EXPECT_EQ(y[31], 7 + 16 - 16);
  EXPECT_EQ(y[15], -16);

  uint8_t s[12] = {};
  s[1] = 5 | (2 << 6);      // sc1 = 5; high bits of sc5 = 2
  s[5] = 9 | (1 << 6);      // m1 = 9; high bits of m5 = 1
  s[9] = 0x3 | (0x4 << 4);  // sc5 low = 3, m5 low = 4
  uint8_t sc, m;
  get_scale_min_k4(1, s, &sc, &m);
  EXPECT_EQ(sc, 5);
  EXPECT_EQ(m, 9);
  get_scale_min_k4(5, s, &sc, &m);
  EXPECT_EQ(sc, 3 | (2 << 4));
  EXPECT_EQ(m, 4 | (1 << 4));
}

// Max |error| of from_float -> to_float allowed for one block of x.
double block_tolerance(DType t, const float* x, int64_t bs) {
  double amax = 0, mn = x[0], mx = x[0];
  for (int64_t j = 0; j < bs; ++j) {
    amax = std::max(amax, double(std::fabs(x[j])));
    mn = std::min(mn, double(x[j]));
    mx = std::max(mx, double(x[j]));
  }
  const double half_rel = 1.0 / 2048;  // fp16 rounding of the scale
  switch (t) {
    case DType::Q8_0:
    case DType::Q8_1:
      return amax / 127 * (0.5 + 127 * half_rel) + 1e-7;
    case DType::Q8_K:
      return amax / 127 * 0.501 + 1e-7;
    case DType::Q4_0:
      return amax / 8 * (1.0 + 8 * half_rel) + 1e-7;
    case DType::Q5_0:
      return amax / 16 * (1.0 + 16 * half_rel) + 1e-7;
    case DType::Q4_1:
      return (mx - mn) / 15 * (0.5 + 15 * half_rel) + std::fabs(mn) * half_rel + 1e-7;
    case DType::Q5_1:
      return (mx - mn) / 31 * (0.5 + 31 * half_rel) + std::fabs(mn) * half_rel + 1e-7;
    default:
      return 0;
  }
}

TEST(QuantRef, RoundTripWithinFormatError) {
  std::mt19937 rng(1);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1,
                  DType::Q8_K, DType::F16, DType::BF16, DType::F32}) {
    const DTypeTraits& tr = dtype_traits_ref(t);
    SCOPED_TRACE(tr.name);
    const int64_t n = 4 * 256;
    std::vector<float> x = random_floats(size_t(n), rng, -3.0f, 2.0f);
    x[5] = 0.0f;
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // all-zero blocks
    std::vector<uint8_t> q(dtype_row_size(t, n));
    std::vector<float> back(static_cast<size_t>(n));
    tr.from_float(x.data(), q.data(), n);
    tr.to_float(q.data(), back.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double tol;
      if (t == DType::F32)
        tol = 0;
      else if (t == DType::F16)
        tol = std::fabs(x[i]) / 2048 + 1e-7;
      else if (t == DType::BF16)
        tol = std::fabs(x[i]) / 256;
      else
        tol = block_tolerance(t, x.data() + i / tr.block_size * tr.block_size, tr.block_size);
      ASSERT_LE(std::fabs(double(back[i]) - x[i]), tol) << "i=" << i;
    }
  }
}

TEST(QuantRef, Q8_1SumFieldAndQ8_KBsums) {
  std::mt19937 rng(2);
  std::vector<float> x = random_floats(256, rng);
  BlockQ8_1 b[8];
  quant_ref::from_float_q8_1(x.data(), b, 256);
  for (int i = 0; i < 8; ++i) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * i + j]));
    int sum = 0;
    for (int8_t v : b[i].qs) sum += v;
    EXPECT_EQ(b[i].s, fp32_to_fp16(float(sum) * (amax / 127)));
  }
  BlockQ8_K k;
  quant_ref::from_float_q8_K(x.data(), &k, 256);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += k.qs[16 * g + j];
    EXPECT_EQ(k.bsums[g], sum);
  }
}

// ---------------------------------------------------------------- AVX2

class Avx2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2 (or OMNIBUS_NO_SIMD set)";
  }
};

// Inputs that stress rounding: random, exact halves, zeros, huge/tiny, one spike.
std::vector<float> tricky_floats(int64_t n, std::mt19937& rng) {
  std::vector<float> x = random_floats(size_t(n), rng, -2.0f, 2.0f);
  for (int64_t i = 0; i < n; i += 7) x[size_t(i)] = float(int(rng() % 255) - 127) * 0.5f;
  for (int64_t i = 0; i < std::min<int64_t>(n, 32); ++i) x[size_t(i)] = 0.0f;
  if (n >= 64) {
    for (int64_t i = 32; i < 64; ++i) x[size_t(i)] = 1e-30f * float(i);
    x[40] = -3e4f;
  }
  if (n >= 512) {
    for (int64_t i = 256; i < 512; ++i) x[size_t(i)] = (i % 3 == 0) ? 4.0f : -4.0f;  // tie in |max|
  }
  return x;
}

TEST_F(Avx2Test, ActivationQuantizersBitExact) {
  std::mt19937 rng(3);
  for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    for (int64_t k : {1, 2, 3, 7, 16}) {
      const int64_t n =
          dtype_traits_ref(t).block_size == 1 ? 32 * k + 5 : dtype_traits_ref(t).block_size * k * 2;
      std::vector<float> x = tricky_floats(n, rng);
      if (t == DType::BF16 &&
          n >= 40) {  // rounding ties either way, NaNs, infinities, the largest finite
        const uint32_t special[8] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0x7f800001u,
                                     0xff800000u, 0x7f800000u, 0x7f7fffffu, 0x80000000u};
        for (int j = 0; j < 8; ++j) std::memcpy(&x[size_t(32 + j)], &special[j], 4);
      }
      std::vector<uint8_t> a(dtype_row_size(t, n)), b(dtype_row_size(t, n));
      dtype_traits_ref(t).from_float(x.data(), a.data(), n);
      dtype_traits(t).from_float(x.data(), b.data(), n);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << "n=" << n;
    }
  }
}

// Q8_K's scale takes its sign from the first element of largest magnitude:
// that element at every position, tied later (or earlier) by one of the other
// sign.
TEST_F(Avx2Test, Q8KSignFromTheFirstLargestElement) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(256);
  BlockQ8_K a, b;
  for (int pos = 0; pos < 256; ++pos) {
    for (float& v : x) v = u(rng);
    x[size_t(pos)] = -3.f;
    x[size_t((pos + 1 + pos % 5) % 256)] = 3.f;  // often in the same 8 lanes
    x[size_t((pos + 37) % 256)] = 3.f;
    quant_ref::from_float_q8_K(x.data(), &a, 256);
    dtype_traits(DType::Q8_K).from_float(x.data(), &b, 256);
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "pos " << pos;
  }
}

TEST_F(Avx2Test, F16ConversionsBitExactWithUtil) {
  // every half value -> float
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = uint16_t(i);
  std::vector<float> f(65536);
  quant_avx2::to_float_f16(h.data(), f.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = fp16_to_fp32(uint16_t(i));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f[i]));
    } else {
      ASSERT_EQ(fp32_to_bits(f[i]), fp32_to_bits(want)) << i;
    }
  }
  // floats around every rounding boundary -> half
  std::vector<float> x;
  for (uint32_t i = 0; i < 0x7c00; i += 3) {
    const float lo = fp16_to_fp32(uint16_t(i)), hi = fp16_to_fp32(uint16_t(i + 1));
    const float mid = 0.5f * (lo + hi);
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  x.push_back(1e6f);
  x.push_back(65520.0f);
  x.push_back(65519.0f);
  std::vector<uint16_t> got(x.size());
  quant_avx2::from_float_f16(x.data(), got.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], fp32_to_fp16(x[i])) << x[i];
}

// |sum_i w_i a_i| scale used for relative tolerances: sum_i |w_i a_i|.
double abs_dot(DType wt, const uint8_t* w, DType at, const uint8_t* a, int64_t n) {
  std::vector<float> fw(static_cast<size_t>(n)), fa(static_cast<size_t>(n));
  dtype_traits_ref(wt).to_float(w, fw.data(), n);
  dtype_traits_ref(at).to_float(a, fa.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(double(fw[i]) * fa[i]);
  return s;
}

// AVX2 dot products vs the reference: same integer sums, float sums in a
// different order, so |diff| <= 2e-6 * sum|w_i a_i| (+1e-30 for all-zero rows).
TEST_F(Avx2Test, VecDotMatchesReference) {
  std::mt19937 rng(4);
  for (DType t : quant_testing::weight_types()) {
    const DTypeTraits& ref = dtype_traits_ref(t);
    const DTypeTraits& fast = dtype_traits(t);
    SCOPED_TRACE(ref.name);
    const DType at = ref.vec_dot_type;
    for (int64_t k : {1, 2, 3, 7, 16, 48}) {
      const int64_t n = ref.block_size == 1 ? 32 * k + (k % 3) : ref.block_size * k;
      for (int rep = 0; rep < 4; ++rep) {
        std::vector<uint8_t> w = random_rows(t, 1, n, rng);
        std::vector<float> x = random_floats(size_t(n), rng);
        std::vector<uint8_t> a(dtype_row_size(at, n));
        dtype_traits_ref(at).from_float(x.data(), a.data(), n);
        const float want = ref.vec_dot(n, w.data(), a.data());
        const float got = fast.vec_dot(n, w.data(), a.data());
        const double tol = 2e-6 * abs_dot(t, w.data(), at, a.data(), n) + 1e-30;
        ASSERT_NEAR(got, want, tol) << "n=" << n;
      }
    }
  }
}

// The reference dot equals the dot of the dequantized rows (up to float
// rounding): ties vec_dot's bit reading to to_float's.
TEST(QuantRef, VecDotAgreesWithDequantizedDot) {
  std::mt19937 rng(5);
  for (DType t : quant_testing::weight_types()) {
    const DTypeTraits& ref = dtype_traits_ref(t);
    SCOPED_TRACE(ref.name);
    const DType at = ref.vec_dot_type;
    const int64_t n = ref.block_size == 1 ? 300 : ref.block_size * 3;
    std::vector<uint8_t> w = random_rows(t, 1, n, rng);
    std::vector<float> x = random_floats(size_t(n), rng);
    std::vector<uint8_t> a(dtype_row_size(at, n));
    dtype_traits_ref(at).from_float(x.data(), a.data(), n);
    std::vector<float> fw(static_cast<size_t>(n)), fa(static_cast<size_t>(n));
    ref.to_float(w.data(), fw.data(), n);
    dtype_traits_ref(at).to_float(a.data(), fa.data(), n);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += double(fw[i]) * fa[i];
    // Q8_1's s field is rounded to fp16, hence the looser bound for Q4_1/Q5_1.
    const double tol = 2e-3 * abs_dot(t, w.data(), at, a.data(), n);
    EXPECT_NEAR(ref.vec_dot(n, w.data(), a.data()), want, tol);
  }
}

}  // namespace
}  // namespace omnibus
