// Row-pair zmm tiles for packed float groups (contract: matmul_float_avx512.h).
#include "kernels/matmul_float_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace omnibus::matmul_float::avx512 {
namespace {

// This file is built for the avx512 tier: it includes no header with inline
// functions (one emitted here, as sanitizer builds do, could be the copy the
// linker keeps for every tier; scripts/check_tier_symbols.sh), not even
// util/check.h: the caller checks the arguments. So the two helpers it shares
// with float_dot_avx2.h are restated here, operation for operation.

// simd::hsum: (lo128 + hi128), then pairs.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// float_dot's single-element loaders (exact conversions to f32).
struct F32x1 {
  static float load1(const void* p, int64_t k) { return static_cast<const float*>(p)[k]; }
};
struct F16x1 {
  static float load1(const void* p, int64_t k) {
    return _cvtsh_ss(static_cast<const uint16_t*>(p)[k]);
  }
};
struct BF16x1 {
  static float load1(const void* p, int64_t k) {
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(p)[k]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

constexpr int kTok = kTokensPerTile;
constexpr int kPairs = 4;  // row pairs per 8-row group

// 16 elements at element offset e: rows 2p and 2p + 1 of one 8-element step.
struct F32x16 {
  static __m512 load16(const uint8_t* g, int64_t e) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(g) + e);
  }
};
struct F16x16 {
  static __m512 load16(const uint8_t* g, int64_t e) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(g) + e)));
  }
};
struct BF16x16 {
  static __m512 load16(const uint8_t* g, int64_t e) {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(g) + e));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

// y[r] = hsum8(lanes of row r) for the 8 rows of one token, r < rows,
// where a_p holds rows 2p (low half) and 2p + 1: the same additions in the
// same association as hsum (lane i + lane i + 4, then pairs (0, 2) and
// (1, 3), then the two), done for all 8 rows together.
inline void store_sums(__m512 a0, __m512 a1, __m512 a2, __m512 a3, float* y, int rows) {
  // 128-bit quarter q of c01: row q's four sums lane i + lane i + 4 (rows 0-3), c23 rows 4-7.
  const __m512 c01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 c23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 1, 3, 1)));
  // quarter q: [s0 + s2, s1 + s3] of row q, then of row q + 4
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(c01, c23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(c01, c23, _MM_SHUFFLE(3, 2, 3, 2)));
  // quarter q: [sum of row q, sum of row q + 4, the same again]
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(t, t, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256 sums = _mm512_castps512_ps256(_mm512_permutexvar_ps(order, r));
  _mm256_mask_storeu_ps(y, __mmask8((1u << rows) - 1), sums);
}

// T tokens (x rows n apart) against the whole group; W16 loads row pairs, W1
// (float_dot's loader) the tail's single elements.
template <int T, class W16, class W1>
void tile(const uint8_t* group, int64_t n, const float* x, float* y, int64_t y_stride, int rows) {
  const int64_t n8 = n - n % 8;
  __m512 acc[kPairs][T];
  for (int p = 0; p < kPairs; ++p) {
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < n8; k += 8) {
    __m512 w[kPairs];
    for (int p = 0; p < kPairs; ++p) w[p] = W16::load16(group, (k + 2 * p) * 8);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + t * n + k));
      for (int p = 0; p < kPairs; ++p) acc[p][t] = _mm512_fmadd_ps(w[p], xv, acc[p][t]);
    }
  }
  if (n8 == n) {  // no scalar tail: the 8 rows' sums of each token at once
    for (int t = 0; t < T; ++t)
      store_sums(acc[0][t], acc[1][t], acc[2][t], acc[3][t], y + t * y_stride, rows);
    return;
  }
  for (int p = 0; p < kPairs; ++p) {
    for (int h = 0; h < 2; ++h) {
      const int r = 2 * p + h;
      if (r >= rows) return;
      for (int t = 0; t < T; ++t) {
        const __m256 lanes =
            h == 0 ? _mm512_castps512_ps256(acc[p][t]) : _mm512_extractf32x8_ps(acc[p][t], 1);
        float s = hsum8(lanes);
        for (int64_t k = n8; k < n; ++k)
          s = std::fma(W1::load1(group, n8 * 8 + r * (n - n8) + (k - n8)), x[t * n + k], s);
        y[t * y_stride + r] = s;
      }
    }
  }
}

template <class W16, class W1>
void run(const uint8_t* group, int64_t n, const float* x, int64_t n_tok, float* y, int64_t y_stride,
         int rows) {
  using Tile = void (*)(const uint8_t*, int64_t, const float*, float*, int64_t, int);
  static constexpr Tile kTiles[kTok] = {&tile<1, W16, W1>, &tile<2, W16, W1>, &tile<3, W16, W1>,
                                        &tile<4, W16, W1>, &tile<5, W16, W1>, &tile<6, W16, W1>};
  for (int64_t t0 = 0; t0 < n_tok; t0 += kTok) {
    const int T = int(std::min<int64_t>(kTok, n_tok - t0));
    kTiles[T - 1](group, n, x + t0 * n, y + t0 * y_stride, y_stride, rows);
  }
}

}  // namespace

void group_tokens(DType type, const uint8_t* group, int64_t n, const float* x, int64_t n_tok,
                  float* y, int64_t y_stride, int rows) {
  switch (type) {
    case DType::F32:
      return run<F32x16, F32x1>(group, n, x, n_tok, y, y_stride, rows);
    case DType::F16:
      return run<F16x16, F16x1>(group, n, x, n_tok, y, y_stride, rows);
    case DType::BF16:
      return run<BF16x16, BF16x1>(group, n, x, n_tok, y, y_stride, rows);
    default:
      std::abort();  // the caller passes F32, F16 or BF16 only
  }
}

}  // namespace omnibus::matmul_float::avx512
