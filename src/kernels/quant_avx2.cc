#include "kernels/quant_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/float_dot_avx2.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/quant_simd_avx2.h"
#include "util/fp16.h"

namespace omnibus::quant_avx2 {
namespace {

using simd::half_to_float;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

}  // namespace

void to_float_f16(const void* x, float* y, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(x);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) y[i] = half_to_float(h[i]);
}

void to_float_bf16(const void* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, float_dot::BF16::load8(x, i));
  for (; i < n; ++i) y[i] = float_dot::BF16::load1(x, i);
}

void from_float_bf16(const float* x, void* y, int64_t n) {
  auto* h = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits =
        float_dot::bf16_round_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    const __m256i top = _mm256_srli_epi32(bits, 16);  // <= 0xffff: packus keeps it
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packus_epi32(top, top), _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) h[i] = fp32_to_bf16(x[i]);
}

void from_float_f16(const float* x, void* y, int64_t n) {
  auto* h = static_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), v);
  }
  for (; i < n; ++i) h[i] = fp32_to_fp16(x[i]);
}

namespace {

// Q8_0 / Q8_1 activations: d = amax / 127; Q8_1 also keeps s = fp16(d * sum(q)).
template <typename Block>
void from_float_q8_32(const float* x, void* y, int64_t n) {
  auto* b = static_cast<Block*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = simd::abs_max_32(x) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    auto* qs = reinterpret_cast<__m256i*>(b[i].qs);
    if constexpr (std::is_same_v<Block, BlockQ8_1>) {
      __m256i sum;
      _mm256_storeu_si256(qs, simd::quantize_32(x, id, &sum));
      b[i].s = fp32_to_fp16(float(simd::hsum_i32(sum)) * d);
    } else {
      _mm256_storeu_si256(qs, simd::quantize_32(x, id, nullptr));
    }
  }
}

}  // namespace

void from_float_q8_0(const float* x, void* y, int64_t n) { from_float_q8_32<BlockQ8_0>(x, y, n); }
void from_float_q8_1(const float* x, void* y, int64_t n) { from_float_q8_32<BlockQ8_1>(x, y, n); }

void from_float_q8_K(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < kQKK; k += 8) m = _mm256_max_ps(m, simd::abs_ps(_mm256_loadu_ps(x + k)));
    const float amax = simd::hmax(m);
    if (amax == 0.0f) {
      std::memset(&b[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    // The first element with |x| == amax gives the sign, as in the reference
    // (the last element when none does: a NaN block), found 8 lanes at a time.
    int first = kQKK - 1;
    const __m256 vamax = _mm256_set1_ps(amax);
    for (int k = 0; k < kQKK - 1; k += 8) {
      const int eq = _mm256_movemask_ps(
          _mm256_cmp_ps(simd::abs_ps(_mm256_loadu_ps(x + k)), vamax, _CMP_EQ_OQ));
      if (eq != 0) {
        first = std::min(kQKK - 1, k + __builtin_ctz(static_cast<unsigned>(eq)));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i v127 = _mm256_set1_epi32(127);
    for (int k = 0; k < kQKK; k += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vs);
        q[j] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
            v127);
      }
      const __m256i packed = simd::pack_i32_to_i8(q[0], q[1], q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + k), packed);
      // bsums of the two groups of 16 in this 32
      const __m256i s16 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), packed),
                                            _mm256_set1_epi16(1));
      const __m128i lo = _mm256_castsi256_si128(s16), hi = _mm256_extracti128_si256(s16, 1);
      const __m128i h = _mm_hadd_epi32(lo, hi);  // [lo0+lo1, lo2+lo3, hi0+hi1, hi2+hi3]
      const __m128i g = _mm_hadd_epi32(h, h);    // [lo sum, hi sum, ...]
      b[i].bsums[k / 16] = int16_t(_mm_cvtsi128_si32(g));
      b[i].bsums[k / 16 + 1] = int16_t(_mm_extract_epi32(g, 1));
    }
    b[i].d = 1 / iscale;
  }
}

// The unquantized formats: float_dot::dot, the float matmul's per-output
// arithmetic (matmul_float_avx2.h), so vec_dot and matmul agree bitwise.
float vec_dot_f32(int64_t n, const void* w, const void* a) {
  return float_dot::dot<float_dot::F32, float_dot::F32>(n, w, a);
}

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  return float_dot::dot<float_dot::F16, float_dot::F16>(n, w, a);
}

float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  return float_dot::dot<float_dot::BF16, float_dot::BF16>(n, w, a);
}

// ------------------------------------------------------- 32-element blocks

// The 32-element formats keep one scalar accumulator and an exact int32 sum
// per block: the per-output arithmetic of the packed matmul
// (matmul_packed_avx2.h), so vec_dot and matmul agree bitwise.
namespace {

// The 32 quants of a block as bytes: signed (q - offset) for the formats
// paired with Q8_0, unsigned q for the ones with a min (paired with Q8_1).
inline __m256i quants(const BlockQ4_0& b) {
  return _mm256_sub_epi8(simd::nibbles_32(b.qs), _mm256_set1_epi8(8));
}
inline __m256i quants(const BlockQ5_0& b) {
  // q - 16 = nibble | 0xF0 (as int8) where the fifth bit is clear, nibble where set.
  const __m256i hi = _mm256_andnot_si256(simd::bits_to_bytes(simd::load_u32(b.qh)),
                                         _mm256_set1_epi8(int8_t(0xF0)));
  return _mm256_or_si256(simd::nibbles_32(b.qs), hi);
}
inline __m256i quants(const BlockQ8_0& b) { return load256(b.qs); }
inline __m256i quants(const BlockQ4_1& b) { return simd::nibbles_32(b.qs); }
inline __m256i quants(const BlockQ5_1& b) {
  const __m256i hi =
      _mm256_and_si256(simd::bits_to_bytes(simd::load_u32(b.qh)), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(simd::nibbles_32(b.qs), hi);
}

// Per block: acc = fma(d_w * d_a, isum, acc), and for the formats with a
// min (Q4_1, Q5_1 against Q8_1) then acc = fma(m_w, s_a, acc).
template <typename Block, typename ActBlock>
float vec_dot_32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const ActBlock*>(a);
  constexpr bool kHasMin = requires(Block b) { b.m; };
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = quants(x[i]);
    const __m256i dot =
        kHasMin ? simd::dot_u8s8(q, load256(y[i].qs)) : simd::dot_s8s8(q, load256(y[i].qs));
    const int32_t isum = simd::hsum_i32(dot);
    acc = std::fma(half_to_float(x[i].d) * half_to_float(y[i].d), float(isum), acc);
    if constexpr (kHasMin) acc = std::fma(half_to_float(x[i].m), half_to_float(y[i].s), acc);
  }
  return acc;
}

}  // namespace

float vec_dot_q4_0(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ4_0, BlockQ8_0>(n, w, a);
}
float vec_dot_q5_0(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ5_0, BlockQ8_0>(n, w, a);
}
float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ8_0, BlockQ8_0>(n, w, a);
}
float vec_dot_q4_1(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ4_1, BlockQ8_1>(n, w, a);
}
float vec_dot_q5_1(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ5_1, BlockQ8_1>(n, w, a);
}

// ------------------------------------------------------------- K-quants

namespace {

// Scales and mins of a Q4_K / Q5_K super-block, and the min correction
// sum_j m_j * (bsums[2j] + bsums[2j+1]).
inline int32_t k4_scales(const uint8_t* packed, const BlockQ8_K& y, uint8_t sc[8]) {
  int32_t msum = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t m;
    get_scale_min_k4(j, packed, &sc[j], &m);
    msum += int32_t(m) * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return msum;  // an exact integer: any summation order gives the same value
}

// One Q4_K / Q5_K super-block's integer dot (scales applied), 8 int32 lanes.
// q(c, lo/hi) gives the 32 unsigned quants of sub-block 2c / 2c + 1.
template <typename QuantsFn>
inline __m256i k4_isum(const uint8_t sc[8], const int8_t* a, QuantsFn quants) {
  __m256i sum = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    __m256i lo, hi;
    quants(c, &lo, &hi);
    const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(a + 64 * c));
    const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(a + 64 * c + 32));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p_lo, _mm256_set1_epi16(sc[2 * c])));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p_hi, _mm256_set1_epi16(sc[2 * c + 1])));
  }
  return sum;
}

// Super-block dots with mins (Q2_K, Q4_K, Q5_K): sums(x[i], y[i], &msum)
// returns the exact int32 isum and sets msum; the float steps are the
// reference's, as two FMA chains: acc += d_w d_a isum, mins += dmin_w d_a msum.
template <typename Block, typename SumsFn>
inline float vec_dot_k_mins(int64_t n, const void* w, const void* a, SumsFn sums) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0.0f, mins = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int32_t msum = 0;
    const int32_t isum = sums(x[i], y[i], &msum);
    acc = std::fma(half_to_float(x[i].d) * y[i].d, float(isum), acc);
    mins = std::fma(half_to_float(x[i].dmin) * y[i].d, float(msum), mins);
  }
  return acc - mins;
}

}  // namespace

// Q4_K keeps exact int32 super-block sums and two scalar accumulators: the
// per-output arithmetic of the packed matmul (matmul_packed_avx2.h).
float vec_dot_q4_K(int64_t n, const void* w, const void* a) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  return vec_dot_k_mins<BlockQ4_K>(
      n, w, a, [&](const BlockQ4_K& x, const BlockQ8_K& y, int32_t* msum) {
        uint8_t sc[8];
        *msum = k4_scales(x.scales, y, sc);
        return simd::hsum_i32(k4_isum(sc, y.qs, [&](int c, __m256i* lo, __m256i* hi) {
          const __m256i q = load256(x.qs + 32 * c);
          *lo = _mm256_and_si256(q, m4);
          *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }));
      });
}

float vec_dot_q5_K(int64_t n, const void* w, const void* a) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  return vec_dot_k_mins<BlockQ5_K>(
      n, w, a, [&](const BlockQ5_K& x, const BlockQ8_K& y, int32_t* msum) {
        uint8_t sc[8];
        *msum = k4_scales(x.scales, y, sc);
        const __m256i qh = load256(x.qh);
        return simd::hsum_i32(k4_isum(sc, y.qs, [&](int c, __m256i* lo, __m256i* hi) {
          const __m256i q = load256(x.qs + 32 * c);
          const __m256i h_lo =
              _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
          const __m256i h_hi =
              _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
          *lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h_lo, 4));
          *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                _mm256_slli_epi16(h_hi, 4));
        }));
      });
}

namespace {

// The 2-bit quants of chunk (half, j) of a Q2_K / Q3_K super-block: elements
// 128 half + 32 j + l (l < 32) are bits 2j, 2j + 1 of qs[32 half + l].
inline __m256i low2_chunk(const uint8_t* qs, int half, int j) {
  return _mm256_and_si256(_mm256_srl_epi16(load256(qs + 32 * half), _mm_cvtsi32_si128(2 * j)),
                          _mm256_set1_epi8(3));
}

// sum over the 16 sub-blocks s of sc[s] * (sum of u * a over s): chunk c =
// 4 half + j holds sub-blocks 2c (its low 16 bytes) and 2c + 1. u(half, j):
// the chunk's 32 unsigned quants (<= 7: |maddubs pair| <= 2 * 7 * 127).
template <typename QuantsFn>
inline int32_t k16_isum(const int16_t sc[16], const int8_t* a, QuantsFn u) {
  __m256i sum = _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    for (int j = 0; j < 4; ++j) {
      const int c = 4 * half + j;
      const __m256i p = _mm256_maddubs_epi16(u(half, j), load256(a + 32 * c));
      const __m256i scv =
          _mm256_setr_m128i(_mm_set1_epi16(sc[2 * c]), _mm_set1_epi16(sc[2 * c + 1]));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, scv));
    }
  }
  return simd::hsum_i32(sum);
}

}  // namespace

// Q2_K / Q3_K (no packed kernel; the generic matmul calls these): exact
// int32 super-block sums, then the reference's float steps as explicit FMAs.
float vec_dot_q2_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k_mins<BlockQ2_K>(
      n, w, a, [](const BlockQ2_K& x, const BlockQ8_K& y, int32_t* msum) {
        int16_t sc[16];
        int32_t m = 0;
        for (int s = 0; s < 16; ++s) {
          sc[s] = int16_t(x.scales[s] & 0xF);
          m += int32_t(x.scales[s] >> 4) * y.bsums[s];
        }
        *msum = m;
        return k16_isum(sc, y.qs, [&](int half, int j) { return low2_chunk(x.qs, half, j); });
      });
}

// Q3_K: u = low 2 bits | hmask bit << 2 in [0, 7], q = u - 4, so
// sum_s sc_s * sum q a = sum_s sc_s * (sum u a - 4 * bsum_s).
float vec_dot_q3_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t sc8[16];
    get_scales_q3_K(x[i].scales, sc8);
    int16_t sc[16];
    int32_t corr = 0;
    for (int s = 0; s < 16; ++s) {
      sc[s] = sc8[s];
      corr += int32_t(sc8[s]) * y[i].bsums[s];
    }
    const __m256i hm = load256(x[i].hmask);
    const int32_t usum = k16_isum(sc, y[i].qs, [&](int half, int j) {
      // hmask bit 4 half + j of byte l, moved to bit 2 (16-bit shifts: bits
      // crossing a byte boundary are masked off)
      const int bit = 4 * half + j;
      const __m256i hb = bit >= 2 ? _mm256_srl_epi16(hm, _mm_cvtsi32_si128(bit - 2))
                                  : _mm256_sll_epi16(hm, _mm_cvtsi32_si128(2 - bit));
      return _mm256_or_si256(low2_chunk(x[i].qs, half, j),
                             _mm256_and_si256(hb, _mm256_set1_epi8(4)));
    });
    acc = std::fma(half_to_float(x[i].d) * y[i].d, float(usum - 4 * corr), acc);
  }
  return acc;
}

// Q6_K: the exact int32 super-block sum and one scalar accumulator, the
// packed matmul's arithmetic (matmul_packed_avx2.h).
float vec_dot_q6_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* sc = x[i].scales;
    // sum_s sc_s * sum (q - 32) a = sum_s sc_s * (sum q a - 32 * bsum_s)
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    const __m256i corr = _mm256_madd_epi16(sc16, load256(y[i].bsums));
    __m256i isum = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load256(x[i].ql + 64 * half);
      const __m256i ql1 = load256(x[i].ql + 64 * half + 32);
      const __m256i qh = load256(x[i].qh + 32 * half);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_and_si256(qh, m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
      };
      for (int k = 0; k < 4; ++k) {
        const int s = 8 * half + 2 * k;  // sub-blocks s (low 128 bits) and s + 1 (high)
        const __m256i p = _mm256_maddubs_epi16(q[k], load256(y[i].qs + 128 * half + 32 * k));
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scv));
      }
    }
    isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5));
    acc = std::fma(half_to_float(x[i].d) * y[i].d, float(simd::hsum_i32(isum)), acc);
  }
  return acc;
}

}  // namespace omnibus::quant_avx2
