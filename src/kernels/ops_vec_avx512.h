// ops_vec_avx2.h's vector math on 16 lanes, op for op, so that lane for lane
// the results are the avx2 tier's (the same IEEE operations in the same
// order: bitwise equal, NaN and infinities included): exp, silu, gelu, the
// gated activations, and the 8-lane horizontal max and sum the avx2 kernels
// end with. Include only from files compiled with the avx512 tier's flags
// (*_avx512.cc, *_amx.cc).
//
// The functions live in namespace omnibus::avx512 (an out-of-line copy the
// compiler emits stays a tier symbol: scripts/check_tier_symbols.sh).
//
// Thread-safety: pure functions.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "kernels/exp_poly.h"

namespace omnibus::avx512 {

// ops_vec_avx2.h's exp_ps.
inline __m512 exp_ps(__m512 x) {
  const __m512 kHi = _mm512_set1_ps(exp_poly::kHi);
  const __m512 kLo = _mm512_set1_ps(exp_poly::kLo);
  const __m512 kLog2e = _mm512_set1_ps(exp_poly::kLog2e);
  const __m512 kLn2Hi = _mm512_set1_ps(exp_poly::kLn2Hi);
  const __m512 kLn2Lo = _mm512_set1_ps(exp_poly::kLn2Lo);
  __m512 xc = _mm512_min_ps(_mm512_set1_ps(exp_poly::kClampHi), x);  // NaN kept, as there
  xc = _mm512_max_ps(_mm512_set1_ps(exp_poly::kClampLo), xc);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, kLog2e),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, kLn2Hi, xc);
  r = _mm512_fnmadd_ps(n, kLn2Lo, r);
  // e^r by Horner over the Taylor coefficients
  __m512 p = _mm512_set1_ps(exp_poly::kP6);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kP0));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, kHi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
  return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, kLo, _CMP_LT_OQ), y);
}

// ops_vec_avx2.h's silu_ps: x / (1 + e^-x).
inline __m512 silu_ps(__m512 x) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// ops_vec_avx2.h's gelu_ps (tanh approximation in its sigmoid form).
inline __m512 gelu_ps(__m512 x) {
  const __m512 kMinus2Sqrt2OverPi = _mm512_set1_ps(-2.0f * 0.79788456080286535588f);
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 inner = _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x2, _mm512_set1_ps(1.0f));
  const __m512 arg = _mm512_mul_ps(_mm512_mul_ps(kMinus2Sqrt2OverPi, x), inner);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(arg)));
}

// ops_avx2.cc's swiglu_avx2 / geglu_avx2 lane for lane: act(g) * u.
inline __m512 swiglu_ps(__m512 g, __m512 u) { return _mm512_mul_ps(silu_ps(g), u); }
inline __m512 geglu_ps(__m512 g, __m512 u) { return _mm512_mul_ps(gelu_ps(g), u); }

// ops_vec_avx2.h's hmax_ps (quant_simd_avx2.h's hmax): one fixed order.
inline float hmax_ps(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// quant_simd_avx2.h's hsum (avx2::hsum_ps): one fixed order.
inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace omnibus::avx512
