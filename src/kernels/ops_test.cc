#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops_internal.h"

namespace omnibus {
namespace {

const int64_t kSizes[] = {1, 7, 8, 9, 64, 576, 1000, 1536};

std::vector<float> random_vec(int64_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// |a - ref| <= rtol * |ref| + atol
void expect_close(const std::vector<float>& a, const std::vector<float>& ref, float rtol,
                  float atol, const char* what) {
  ASSERT_EQ(a.size(), ref.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::fabs(a[i] - ref[i]), rtol * std::fabs(ref[i]) + atol)
        << what << " n=" << a.size() << " i=" << i << " got " << a[i] << " want " << ref[i];
  }
}

#define SKIP_WITHOUT_AVX2() \
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2"

TEST(OpsTest, RmsNormMatchesRef) {
  SKIP_WITHOUT_AVX2();
  for (int64_t n : kSizes) {
    for (bool with_w : {false, true}) {
      const int64_t rows = 3;
      auto x = random_vec(rows * n, 2.f, 1);
      auto w = random_vec(n, 1.f, 2);
      std::vector<float> y(rows * n), yr(rows * n);
      rms_norm_avx2(x.data(), with_w ? w.data() : nullptr, y.data(), rows, n, 1e-5f);
      rms_norm_ref(x.data(), with_w ? w.data() : nullptr, yr.data(), rows, n, 1e-5f);
      expect_close(y, yr, 1e-6f, 1e-7f, "rms_norm");
    }
  }
}

TEST(OpsTest, RmsNormValue) {
  const float x[4] = {1.f, -2.f, 3.f, -4.f};
  const float w[4] = {1.f, 2.f, 0.5f, 1.f};
  float y[4];
  rms_norm(x, w, y, 1, 4, 0.f);
  const float inv = 1.f / std::sqrt((1.f + 4.f + 9.f + 16.f) / 4.f);
  EXPECT_NEAR(y[0], 1.f * inv, 1e-6f);
  EXPECT_NEAR(y[1], -4.f * inv, 1e-6f);
  EXPECT_NEAR(y[2], 1.5f * inv, 1e-6f);
  EXPECT_NEAR(y[3], -4.f * inv, 1e-6f);
}

TEST(OpsTest, RmsNormInPlaceAndBatchInvariant) {
  const int64_t n = 576;
  auto x = random_vec(5 * n, 1.f, 3);
  auto w = random_vec(n, 1.f, 4);
  std::vector<float> all = x;
  rms_norm(all.data(), w.data(), all.data(), 5, n, 1e-6f);  // in place, 5 rows
  std::vector<float> one(n);
  rms_norm(x.data() + 3 * n, w.data(), one.data(), 1, n, 1e-6f);
  EXPECT_EQ(0, std::memcmp(one.data(), all.data() + 3 * n, n * sizeof(float)));
}

TEST(OpsTest, ActivationsMatchRef) {
  SKIP_WITHOUT_AVX2();
  for (int64_t n : kSizes) {
    auto g = random_vec(n, 4.f, 5);
    auto u = random_vec(n, 1.f, 6);
    if (n >= 8) {  // extremes
      g[0] = 100.f;
      g[1] = -100.f;
      g[2] = 0.f;
      g[3] = 1e-4f;
      g[4] = -20.f;
    }
    std::vector<float> a(n), r(n);
    // gelu's reference computes 1 + tanh(y), whose cancellation for negative
    // x costs it accuracy (absolute ~6e-8 |x|); the AVX2 sigmoid form is exact-er.
    silu_avx2(g.data(), a.data(), n);
    silu_ref(g.data(), r.data(), n);
    expect_close(a, r, 1e-6f, 1e-30f, "silu");
    gelu_avx2(g.data(), a.data(), n);
    gelu_ref(g.data(), r.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(a[i] - r[i]), 1e-6f * std::fabs(r[i]) + 1.2e-7f * std::fabs(g[i]))
          << "gelu " << g[i];
    }
    swiglu_avx2(g.data(), u.data(), a.data(), n);
    swiglu_ref(g.data(), u.data(), r.data(), n);
    expect_close(a, r, 1e-6f, 1e-30f, "swiglu");
    geglu_avx2(g.data(), u.data(), a.data(), n);
    geglu_ref(g.data(), u.data(), r.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(a[i] - r[i]), 1e-6f * std::fabs(r[i]) + 1.2e-7f * std::fabs(g[i] * u[i]))
          << "geglu " << g[i];
    }
  }
}

TEST(OpsTest, ActivationValues) {
  const float x[3] = {0.f, 1.f, -2.f};
  float y[3];
  silu(x, y, 3);
  EXPECT_FLOAT_EQ(y[0], 0.f);
  EXPECT_NEAR(y[1], 0.7310586f, 1e-6f);
  EXPECT_NEAR(y[2], -0.2384058f, 1e-6f);
  gelu(x, y, 3);
  EXPECT_FLOAT_EQ(y[0], 0.f);
  EXPECT_NEAR(y[1], 0.8411920f, 1e-6f);   // gelu_tanh(1)
  EXPECT_NEAR(y[2], -0.0454023f, 1e-6f);  // gelu_tanh(-2)
  const float g[2] = {1.f, -2.f}, u[2] = {2.f, 3.f};
  float o[2];
  swiglu(g, u, o, 2);
  EXPECT_NEAR(o[0], 2 * 0.7310586f, 1e-6f);
  EXPECT_NEAR(o[1], 3 * -0.2384058f, 1e-6f);
  geglu(g, u, o, 2);
  EXPECT_NEAR(o[0], 2 * 0.8411920f, 1e-6f);
}

TEST(OpsTest, SwigluInPlace) {
  auto g = random_vec(100, 2.f, 7);
  auto u = random_vec(100, 1.f, 8);
  std::vector<float> want(100);
  swiglu(g.data(), u.data(), want.data(), 100);
  swiglu(g.data(), u.data(), g.data(), 100);
  EXPECT_EQ(g, want);
}

TEST(OpsTest, SoftmaxMatchesRef) {
  SKIP_WITHOUT_AVX2();
  for (int64_t n : kSizes) {
    auto x = random_vec(n, 5.f, 9);
    if (n > 3) x[2] = -__builtin_inff();  // masked entry
    auto r = x;
    softmax_avx2(x.data(), n);
    softmax_ref(r.data(), n);
    expect_close(x, r, 2e-6f, 1e-30f, "softmax");
    double sum = 0;
    for (float v : x) sum += v;
    EXPECT_NEAR(sum, 1.0, 1e-5);
    if (n > 3) {
      EXPECT_EQ(x[2], 0.f);
    }
  }
}

// The fast argmax against the reference: odd sizes, ties (lowest index wins),
// NaN (never wins), all -inf / NaN (index 0).
TEST(OpsTest, ArgmaxMatchesReference) {
  for (int64_t n : kSizes) {
    if (n == 0) continue;
    auto x = random_vec(n, 3.f, 21);
    EXPECT_EQ(argmax(x.data(), n), argmax_ref(x.data(), n)) << n;
    const int64_t hi = n * 2 / 3;
    x[size_t(hi)] = 100.f;
    x[size_t(n - 1)] = 100.f;  // a tie at the end
    EXPECT_EQ(argmax(x.data(), n), hi) << n;
    if (n > 1) x[0] = std::nanf("");
    EXPECT_EQ(argmax(x.data(), n), hi) << n;
    std::vector<float> none(size_t(n), -__builtin_inff());
    none[size_t(n - 1)] = std::nanf("");
    EXPECT_EQ(argmax(none.data(), n), 0) << n;
    EXPECT_EQ(argmax_ref(none.data(), n), 0) << n;
  }
}

TEST(OpsTest, LogSumExpCloseToReference) {
  for (int64_t n : kSizes) {
    if (n == 0) continue;
    auto x = random_vec(n, 8.f, 22);
    if (n > 3) x[1] = -__builtin_inff();  // a masked token adds nothing
    const float max = x[size_t(argmax_ref(x.data(), n))];
    const float got = log_sum_exp(x.data(), n, max), want = log_sum_exp_ref(x.data(), n, max);
    EXPECT_NEAR(got, want, 2e-6f * std::max(1.f, std::fabs(want))) << n;
    EXPECT_GE(want, max);
    EXPECT_GE(got, max);
  }
  const float one = 3.25f;
  EXPECT_EQ(log_sum_exp(&one, 1, one), one);
  const float big[3] = {1000.f, 1000.f, -1e30f};
  EXPECT_NEAR(log_sum_exp(big, 3, 1000.f), 1000.f + std::log(2.f), 1e-3f);
}

TEST(OpsTest, SoftmaxLargeValuesStable) {
  float x[3] = {1000.f, 1000.f, 0.f};
  softmax(x, 3);
  EXPECT_NEAR(x[0], 0.5f, 1e-6f);
  EXPECT_NEAR(x[1], 0.5f, 1e-6f);
  EXPECT_EQ(x[2], 0.f);
}

TEST(OpsTest, AddAndScale) {
  for (int64_t n : kSizes) {
    auto y = random_vec(n, 1.f, 10);
    auto x = random_vec(n, 1.f, 11);
    auto y0 = y;
    add_inplace(y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], y0[i] + x[i]);
    scale_inplace(y.data(), 0.25f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], (y0[i] + x[i]) * 0.25f);
  }
}

// RoPE against the formula written directly (double precision angles).
void rope_direct(float* xh, int pos, int head_dim, const RopeParams& p) {
  const int half = p.n_rot / 2;
  std::vector<double> out(xh, xh + head_dim);
  for (int i = 0; i < half; ++i) {
    const double ff = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0;
    const double theta =
        p.freq_scale * pos * std::pow(double(p.freq_base), -2.0 * i / p.n_rot) / ff;
    const double c = std::cos(theta) * p.attn_factor, s = std::sin(theta) * p.attn_factor;
    const int i0 = p.mode == RopeMode::kNormal ? 2 * i : i;
    const int i1 = p.mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
    out[i0] = xh[i0] * c - xh[i1] * s;
    out[i1] = xh[i0] * s + xh[i1] * c;
  }
  for (int i = 0; i < head_dim; ++i) xh[i] = static_cast<float>(out[i]);
}

TEST(OpsTest, RopeMatchesDirectFormula) {
  const int head_dim = 64, n_heads = 3;
  const int32_t pos[] = {0, 1, 7, 100, 511};
  const int n_tok = 5;
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int n_rot : {64, 32}) {
      for (float freq_scale : {1.f, 0.25f}) {
        RopeParams p;
        p.mode = mode;
        p.n_rot = n_rot;
        p.freq_base = 10000.f;
        p.freq_scale = freq_scale;
        auto x = random_vec(n_tok * n_heads * head_dim, 1.f, 12);
        auto want = x;
        auto ref = x;
        rope(x.data(), pos, n_tok, n_heads, head_dim, p);
        rope_ref(ref.data(), pos, n_tok, n_heads, head_dim, p);
        EXPECT_EQ(x, ref) << "rope and rope_ref must agree bit for bit";
        for (int t = 0; t < n_tok; ++t) {
          for (int h = 0; h < n_heads; ++h)
            rope_direct(&want[(t * n_heads + h) * head_dim], pos[t], head_dim, p);
        }
        // float angles (theta up to ~500 rad) lose ~pos * 2^-24 of accuracy
        for (size_t i = 0; i < x.size(); ++i) {
          const int t = static_cast<int>(i / (n_heads * head_dim));
          ASSERT_NEAR(x[i], want[i], 2e-6f + 2e-7f * pos[t]) << "i=" << i << " n_rot=" << n_rot;
        }
        // dims past n_rot pass through unchanged
        auto orig = random_vec(n_tok * n_heads * head_dim, 1.f, 12);
        for (int t = 0; t < n_tok; ++t) {
          for (int h = 0; h < n_heads; ++h) {
            for (int d = n_rot; d < head_dim; ++d) {
              const size_t k = (t * n_heads + h) * head_dim + d;
              ASSERT_EQ(x[k], orig[k]);
            }
          }
        }
      }
    }
  }
}

// Llama 3 / LongRoPE: per-frequency divisors and a magnitude factor, against
// the direct formula, and rope == rope_ref bit for bit.
TEST(OpsTest, RopeFrequencyFactorsAndAttnFactor) {
  const int head_dim = 64, n_heads = 2;
  const int32_t pos[] = {0, 3, 250, 4000};
  const int n_tok = 4;
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int n_rot : {64, 48}) {
      std::vector<float> factors(size_t(n_rot / 2));
      for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.37f * float(i);
      RopeParams p;
      p.mode = mode;
      p.n_rot = n_rot;
      p.freq_base = 500000.f;
      p.freq_factors = factors.data();
      p.attn_factor = 1.19f;
      auto x = random_vec(n_tok * n_heads * head_dim, 1.f, 13);
      auto want = x, ref = x, plain = x;
      rope(x.data(), pos, n_tok, n_heads, head_dim, p);
      rope_ref(ref.data(), pos, n_tok, n_heads, head_dim, p);
      EXPECT_EQ(x, ref) << "rope and rope_ref must agree bit for bit";
      for (int t = 0; t < n_tok; ++t) {
        for (int h = 0; h < n_heads; ++h)
          rope_direct(&want[(t * n_heads + h) * head_dim], pos[t], head_dim, p);
      }
      for (size_t i = 0; i < x.size(); ++i) {
        const int t = static_cast<int>(i / (n_heads * head_dim));
        ASSERT_NEAR(x[i], want[i], 4e-6f + 2e-7f * pos[t]) << "i=" << i << " n_rot=" << n_rot;
      }
      // The factors change the result (the test would notice them ignored).
      RopeParams q = p;
      q.freq_factors = nullptr;
      rope(plain.data(), pos, n_tok, n_heads, head_dim, q);
      EXPECT_NE(plain, x);
    }
  }
}

TEST(OpsTest, RopePairsByMode) {
  // pos 1, n_rot 4, head_dim 4: pair 0 turns by 1 rad, pair 1 by base^-0.5 rad.
  RopeParams p;
  p.n_rot = 4;
  p.freq_base = 100.f;
  const int32_t pos[] = {1};
  float a[4] = {1, 0, 0, 0};
  rope(a, pos, 1, 1, 4, p);  // normal: (x0, x1) pair
  EXPECT_NEAR(a[0], std::cos(1.f), 1e-6f);
  EXPECT_NEAR(a[1], std::sin(1.f), 1e-6f);
  EXPECT_EQ(a[2], 0.f);
  p.mode = RopeMode::kNeox;
  float b[4] = {1, 0, 0, 0};
  rope(b, pos, 1, 1, 4, p);  // neox: (x0, x2) pair
  EXPECT_NEAR(b[0], std::cos(1.f), 1e-6f);
  EXPECT_EQ(b[1], 0.f);
  EXPECT_NEAR(b[2], std::sin(1.f), 1e-6f);
}

}  // namespace
}  // namespace omnibus
