// AVX2 vector math shared by the *_avx2.cc kernels: exp, silu, gelu and
// horizontal sums. Include only from files compiled with -mavx2 -mfma.
//
// exp: x = n*ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r by its
// degree-6 Taylor polynomial (truncation < 2e-7 relative), 2^n applied as two
// exact power-of-two factors so results down to the subnormal range are right.
// Max relative error about 3e-7 against std::exp; exp(-inf) = 0, exp(+inf) =
// inf, NaN propagates.
//
// Thread-safety: pure functions.
#pragma once

#include <immintrin.h>

#include "kernels/exp_poly.h"
#include "kernels/quant_simd_avx2.h"

namespace omnibus::avx2 {

inline __m256 exp_ps(__m256 x) {
  const __m256 kHi = _mm256_set1_ps(exp_poly::kHi);  // above: +inf
  const __m256 kLo = _mm256_set1_ps(exp_poly::kLo);  // below: 0
  const __m256 kLog2e = _mm256_set1_ps(exp_poly::kLog2e);
  const __m256 kLn2Hi = _mm256_set1_ps(exp_poly::kLn2Hi);
  const __m256 kLn2Lo = _mm256_set1_ps(exp_poly::kLn2Lo);
  // clamp, keeping NaN (min/max return the second operand when one is NaN)
  __m256 xc = _mm256_min_ps(_mm256_set1_ps(exp_poly::kClampHi), x);
  xc = _mm256_max_ps(_mm256_set1_ps(exp_poly::kClampLo), xc);
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(xc, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kLn2Hi, xc);
  r = _mm256_fnmadd_ps(n, kLn2Lo, r);
  // e^r by Horner over the Taylor coefficients
  __m256 p = _mm256_set1_ps(exp_poly::kP6);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kP0));
  // 2^n = 2^n1 * 2^n2, n1 = floor(n/2), both within the normal exponent range
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, kHi, _CMP_GT_OQ));
  y = _mm256_andnot_ps(_mm256_cmp_ps(x, kLo, _CMP_LT_OQ), y);
  return y;
}

// silu(x) = x / (1 + e^-x)
inline __m256 silu_ps(__m256 x) {
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

// gelu, tanh approximation: 0.5x(1 + tanh(y)) = x / (1 + e^(-2y)),
// y = sqrt(2/pi) * x * (1 + 0.044715 x^2). The sigmoid form avoids the
// cancellation of 1 + tanh(y) for negative x.
inline __m256 gelu_ps(__m256 x) {
  const __m256 kMinus2Sqrt2OverPi = _mm256_set1_ps(-2.0f * 0.79788456080286535588f);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x2, _mm256_set1_ps(1.0f));
  const __m256 arg = _mm256_mul_ps(_mm256_mul_ps(kMinus2Sqrt2OverPi, x), inner);
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ps(arg)));
}

// Sum of the 8 lanes in one fixed order: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)),
// the quant kernels' simd::hsum.
inline float hsum_ps(__m256 v) { return simd::hsum(v); }

inline float hmax_ps(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline double hsum_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// Lanes i < n set (all ones), the rest clear; 0 <= n <= 8.
inline __m256i tail_mask(int n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

}  // namespace omnibus::avx2
