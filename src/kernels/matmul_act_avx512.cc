// The avx512 tier's activation tiles (matmul_act_avx512.h).
//
// The avx2 tier quantizes a gated super-block as swiglu_avx2 into a buffer,
// from_float_q8_K of that into a BlockQ8_K, and copies of it into the tile;
// here the 256 activations stay in 16 registers from the gate to the quants,
// and the block sums come from vpsadbw. Activation quantization and swiglu
// were 7.8% of a 1B-shaped Q4_K_M pp512's CPU samples on a Sapphire Rapids
// Xeon (amx tier), 5.9% after (docs/performance.md, round (r)). The gate and
// up rows of a prompt come from memory (the tile unit writes them with
// streaming stores); a software prefetch of them 4 or 8 KB ahead measured
// no faster.
#include "kernels/matmul_act_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

// GCC 12's 512-bit intrinsics pass _mm512_undefined_*() vectors that its
// -Wuninitialized flags where inlined here (GCC PR 105593, fixed in 13), as in
// kernels/matmul_packed_kquants_amx.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/ops_vec_avx512.h"
#include "kernels/quant_blocks.h"

namespace omnibus::matmul_act::avx512 {
namespace {

constexpr int kVecs = kQKK / 16;  // a super-block's 16-lane vectors

// act(g, u) of in.gate, op for op ops_avx2.cc's swiglu_avx2 / geglu_avx2.
inline __m512 gated(Gate gate, __m512 g, __m512 u) {
  return gate == Gate::kSwiglu ? omnibus::avx512::swiglu_ps(g, u) : omnibus::avx512::geglu_ps(g, u);
}

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// One super-block (v: its 256 values) as quant_avx2.cc's from_float_q8_K
// writes it, into lane `lane` of `a`; a's lane is zero on entry.
[[gnu::always_inline]] inline void quantize_super(const __m512 (&v)[kVecs], ActBlockK& a,
                                                  int64_t lane) {
  // amax in the avx2 kernel's order (8-lane maxima over the 32 halves in
  // turn, then its horizontal max): the same value, NaN lanes included
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < kVecs; ++j) {
    m = _mm256_max_ps(m, abs8(_mm512_castps512_ps256(v[j])));
    m = _mm256_max_ps(m, abs8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[j]), 1))));
  }
  const float amax = omnibus::avx512::hmax_ps(m);
  if (amax == 0.0f) return;  // the lane stays zero, as from_float_q8_K's memset
  // the first element with |x| == amax gives the sign (the last when none
  // does: a NaN block)
  const __m512 vamax = _mm512_set1_ps(amax);
  int first = kQKK - 1;
  for (int j = 0; j < kVecs; ++j) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(v[j]), vamax, _CMP_EQ_OQ);
    if (eq != 0) {
      first = std::min(kQKK - 1, 16 * j + __builtin_ctz(unsigned(eq)));
      break;
    }
  }
  alignas(64) float at_first[16];
  _mm512_store_ps(at_first, v[first / 16]);
  const float iscale = -127.f / at_first[first % 16];
  const __m512 vs = _mm512_set1_ps(iscale);
  // The quants: the avx2 kernel's min(q, 127) and saturating packs are one
  // saturating narrowing here (-128 only for a NaN product). Their block
  // sums by vpsadbw on the bytes biased to unsigned (+128 each): 8-byte
  // sums per 64-bit lane, two lanes per 16-element block.
  alignas(64) uint64_t sads[kVecs / 4][8];
  const __m512i bias = _mm512_set1_epi8(int8_t(0x80));
  for (int i = 0; i < kVecs / 4; ++i) {
    __m128i q8[4];
    for (int h = 0; h < 4; ++h) {
      const __m512 x = _mm512_mul_ps(v[4 * i + h], vs);
      q8[h] = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(
          _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    }
    __m512i q = _mm512_castsi128_si512(q8[0]);
    q = _mm512_inserti32x4(q, q8[1], 1);
    q = _mm512_inserti32x4(q, q8[2], 2);
    q = _mm512_inserti32x4(q, q8[3], 3);
    _mm512_storeu_si512(a.qs[lane] + 64 * i, q);
    _mm512_store_si512(sads[i], _mm512_sad_epu8(_mm512_xor_si512(q, bias), _mm512_setzero_si512()));
  }
  int16_t* bsums = a.bsums[lane];
  for (int j = 0; j < kVecs; ++j) {
    const uint64_t* sd = sads[j / 4] + 2 * (j % 4);
    bsums[j] = int16_t(int64_t(sd[0] + sd[1]) - 16 * 128);
  }
  for (int j = 0; j < kVecs / 2; ++j)
    a.bsum_pairs[lane][j] = int16_t(bsums[2 * j] + bsums[2 * j + 1]);
  a.d[lane] = 1 / iscale;
}

template <Gate G>
void quantize_rows_k(const TileInput& in, int64_t n_in, int64_t n_valid, ActBlockK* act) {
  const int64_t nsb = n_in / kQKK;
  for (int64_t lane = 0; lane < n_valid; ++lane) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const size_t at = size_t(lane * n_in + sb * kQKK);
      __m512 v[kVecs];
      for (int j = 0; j < kVecs; ++j) {
        const __m512 x = _mm512_loadu_ps(in.x + at + 16 * j);
        if constexpr (G == Gate::kNone) {
          v[j] = x;
        } else {
          v[j] = gated(G, x, _mm512_loadu_ps(in.up + at + 16 * j));
        }
      }
      quantize_super(v, act[sb], lane);
    }
  }
}

}  // namespace

void quantize_tile_k(const TileInput& in, int64_t n_in, int64_t n_valid, ActBlockK* act) {
  std::memset(act, 0, size_t(n_in / kQKK) * sizeof(ActBlockK));
  switch (in.gate) {
    case Gate::kNone:
      return quantize_rows_k<Gate::kNone>(in, n_in, n_valid, act);
    case Gate::kSwiglu:
      return quantize_rows_k<Gate::kSwiglu>(in, n_in, n_valid, act);
    case Gate::kGeglu:
      return quantize_rows_k<Gate::kGeglu>(in, n_in, n_valid, act);
  }
}

void gated_span(const TileInput& in, size_t at, int64_t n, float* out) {
  const float* g = in.x + at;
  const float* u = in.up + at;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, gated(in.gate, _mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(
        out + i, m,
        gated(in.gate, _mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

}  // namespace omnibus::matmul_act::avx512
