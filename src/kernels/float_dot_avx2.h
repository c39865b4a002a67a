// The dot product of unquantized rows (F32, F16, BF16), shared by
// quant_avx2's vec_dot_{f32,f16,bf16} and the float matmul
// (matmul_float_avx2.h), so that both compute every output the same way:
//
//   n8 = n - n % 8; lane l (0..7) accumulates k = l, l + 8, ... < n8 in
//   increasing k, one FMA chain from 0: acc = fma(w[k..k+8), a[k..k+8), acc);
//   s = simd::hsum(acc); then s = fma(w[k], a[k], s) for k in [n8, n).
//
// Elements are converted exactly to f32 first (fp16 / bf16 -> f32 is exact),
// so a matmul may read its activations as f32 holding the converted values.
// Include only from *_avx2.cc files (compiled with -mavx2 -mfma -mf16c).
//
// Thread-safety: pure inline functions.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/quant_simd_avx2.h"

namespace omnibus::float_dot {

// Element loaders: 8 consecutive elements from k, or one, as f32.
struct F32 {
  static __m256 load8(const void* p, int64_t k) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + k);
  }
  static float load1(const void* p, int64_t k) { return static_cast<const float*>(p)[k]; }
};
struct F16 {
  static __m256 load8(const void* p, int64_t k) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + k)));
  }
  static float load1(const void* p, int64_t k) {
    return _cvtsh_ss(static_cast<const uint16_t*>(p)[k]);
  }
};
struct BF16 {
  static __m256 load8(const void* p, int64_t k) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float load1(const void* p, int64_t k) {
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(p)[k]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

// fp32 -> bf16 of 8 values as fp32 bit patterns (low 16 bits zero): round
// to nearest even, NaN kept quiet -- util/fp16.h's fp32_to_bf16, bit for bit.
inline __m256i bf16_round_bits(__m256i u) {
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i hi = _mm256_set1_epi32(int32_t(0xffff0000u));
  const __m256i rounded =
      _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), hi);
  const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), hi);
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

// The per-output arithmetic above, for one row of W against one of A.
template <class W, class A>
inline float dot(int64_t n, const void* w, const void* a) {
  const int64_t n8 = n - n % 8;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t k = 0; k < n8; k += 8) acc = _mm256_fmadd_ps(W::load8(w, k), A::load8(a, k), acc);
  float s = simd::hsum(acc);
  for (int64_t k = n8; k < n; ++k) s = std::fma(W::load1(w, k), A::load1(a, k), s);
  return s;
}

}  // namespace omnibus::float_dot
