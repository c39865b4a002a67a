// Small AVX2 building blocks shared by quant_avx2.cc and matmul_act_avx2.cc.
// Include only from *_avx2.cc files (compiled with -mavx2 -mfma -mf16c).
//
// Thread-safety: pure inline functions.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace omnibus::simd {

// Fixed-order horizontal sum of 8 floats: (lo128 + hi128), then pairs.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32_128(__m128i s) {
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline int32_t hsum_i32(__m256i v) {
  return hsum_i32_128(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) in the
// low 128 bits, high nibbles (elements 16..31) in the high 128 bits.
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, byte j = 0xFF if bit j is set, else 0.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
  const __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(bits)), shuf);
  const __m256i sel = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(x, sel), sel);
}

// sum of u8 x s8 products, 4 per int32 lane. Products fit int16 pairs when
// |u| * |s| * 2 <= 32767 (4-6-bit weights, or |w| <= 128 with the sign trick).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// sum of s8 x s8 products via the sign trick: |w| * (a with w's sign).
inline __m256i dot_s8s8(__m256i w, __m256i a) {
  return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

// roundf() on 8 lanes: round half away from zero, bit-exact with the scalar.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
  const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
  const __m256 need = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), sign);
  return _mm256_add_ps(t, _mm256_and_ps(need, one));
}

// 4 x 8 int32 (values in int8 range) -> 32 int8 in order.
inline __m256i pack_i32_to_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i p01 = _mm256_packs_epi32(i0, i1);
  const __m256i p23 = _mm256_packs_epi32(i2, i3);
  const __m256i p = _mm256_packs_epi16(p01, p23);
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float abs_max_32(const float* x) {
  __m256 m = abs_ps(_mm256_loadu_ps(x));
  for (int k = 1; k < 4; ++k) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8 * k)));
  return hmax(m);
}

// roundf(x[j] * id) for 32 floats, as int8 (bit-exact with the scalar
// reference quantizers); *sum_i32 (if not null) gets their sum in 8 lanes.
inline __m256i quantize_32(const float* x, float id, __m256i* sum_i32) {
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid);
    q[k] = _mm256_cvtps_epi32(round_half_away(v));
  }
  if (sum_i32 != nullptr) {
    *sum_i32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  }
  return pack_i32_to_i8(q[0], q[1], q[2], q[3]);
}

}  // namespace omnibus::simd
