// AVX2 quantization of KV rows on store (layouts: kv_quant.h). The scalar
// codecs in kv_quant.cc are the definition; these produce the same bytes:
// min/max do not depend on order, and each level is the same IEEE quotient
// (x - m) / d rounded to nearest even and clamped, as lrint does.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kv/attention_internal.h"

namespace omnibus {
namespace {

inline float hmin(__m256 v) {
  __m128 x = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_min_ps(x, _mm_movehl_ps(x, x));
  x = _mm_min_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

inline float hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// Levels of 8 values: d > 0 ? clamp(round_even((x - m) / d), 0, max) : 0.
inline __m256i levels8(__m256 x, __m256 d, __m256 m, __m256i max_level) {
  const __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_sub_ps(x, m), d),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256i l = _mm256_cvtps_epi32(q);  // NaN / out of range -> INT_MIN -> 0 below, like lrint
  l = _mm256_min_epi32(_mm256_max_epi32(l, _mm256_setzero_si256()), max_level);
  const __m256 ok = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_GT_OQ);
  return _mm256_and_si256(l, _mm256_castps_si256(ok));
}

// 16 levels (each 0..255) of two vectors as 16 bytes, in order.
inline __m128i to_bytes16(__m256i a, __m256i b) {
  const __m256i w =
      _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);  // a0..7 b0..7 as int16
  return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

}  // namespace

void kv_minmax_avx2(const float* x, int n, float* lo, float* hi) {
  __m256 a = _mm256_loadu_ps(x), b = a;
  for (int i = 8; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a = _mm256_min_ps(a, v);
    b = _mm256_max_ps(b, v);
  }
  *lo = hmin(a);
  *hi = hmax(b);
}

void kv_channel_minmax_avx2(const float* x, int n_rows, int hd, float* lo, float* hi) {
  for (int c = 0; c < hd; c += 8) {
    __m256 a = _mm256_loadu_ps(x + c), b = a;
    for (int r = 1; r < n_rows; ++r) {
      const __m256 v = _mm256_loadu_ps(x + size_t(r) * hd + c);
      a = _mm256_min_ps(a, v);
      b = _mm256_max_ps(b, v);
    }
    _mm256_storeu_ps(lo + c, a);
    _mm256_storeu_ps(hi + c, b);
  }
}

void kv_pack_row_avx2(uint8_t* codes, int hd, int bits, const float* x, const float* d,
                      const float* m, bool per_channel) {
  const int per = 8 / bits, q = hd / per;
  const __m256i max_level = _mm256_set1_epi32((1 << bits) - 1);
  for (int j = 0; j < q; j += 16) {
    __m128i acc = _mm_setzero_si128();
    for (int k = 0; k < per; ++k) {
      const int c = j + k * q;
      const __m256 d0 = per_channel ? _mm256_loadu_ps(d + c) : _mm256_set1_ps(d[0]);
      const __m256 d1 = per_channel ? _mm256_loadu_ps(d + c + 8) : _mm256_set1_ps(d[0]);
      const __m256 m0 = per_channel ? _mm256_loadu_ps(m + c) : _mm256_set1_ps(m[0]);
      const __m256 m1 = per_channel ? _mm256_loadu_ps(m + c + 8) : _mm256_set1_ps(m[0]);
      const __m128i lv = to_bytes16(levels8(_mm256_loadu_ps(x + c), d0, m0, max_level),
                                    levels8(_mm256_loadu_ps(x + c + 8), d1, m1, max_level));
      // level << bits*k stays inside its byte (level < 2^bits, bits*k + bits <= 8)
      acc = _mm_or_si128(acc, _mm_sll_epi16(lv, _mm_cvtsi32_si128(bits * k)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + j), acc);
  }
}

}  // namespace omnibus
