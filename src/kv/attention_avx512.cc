// The avx512 tier's paged-attention tile kernel: a group of up to 4 queries
// (a token's GQA heads) through one tile of K/V rows (an f32 pool; f16 rows
// as stored, converted on load, or widened once per tile where more queries
// than one group read them; q4 / kivi2 rows dequantized once per tile):
// scores, the online-softmax step, P.V, with the 32 zmm registers holding all
// four queries' accumulators, so each K and V load serves four queries
// instead of attention_avx2.cc's three.
//
// Bitwise the avx2 kernel's results (kv/attention_test.cc,
// AttentionTiers.SameBitsEveryTier): every output lane runs the same chain of
// operations as there.
//   Scores: avx2 keeps one 8-lane FMA chain over head_dim per (query, key row)
//   and sums its lanes in transpose_sum8's order. Here a zmm holds two rows'
//   chains (rows r and r + 4 of the 8-row group, the query's 8 elements
//   broadcast to both halves): the same FMAs lane for lane, then the same
//   additions as transpose_sum8's tree, on whole zmm (half_sums8).
//   Softmax step: each lane's scale, mask and exp (the same polynomial, op
//   for op) on 16 lanes at a time; the running max and sum fold the 8-lane
//   groups in avx2's order, with its horizontal max and sum; the group's
//   queries side by side (softmax_n).
//   P.V: each output element is acc * alpha then one FMA per key in
//   increasing order, whatever the vector width: 16 lanes at a time here.
//
// Compiled with the avx512 tier's flags (CMakeLists.txt); every symbol it
// defines is in namespace attn::avx512 (scripts/check_tier_symbols.sh).
// Thread-safety: pure functions of their arguments; `pf` is the calling
// thread's queue.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

// GCC 12's 512-bit intrinsics pass _mm512_undefined_*() vectors that its
// -Wuninitialized flags where inlined here (GCC PR 105593, fixed in 13), as in
// kernels/matmul_packed_kquants_amx.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/ops_vec_avx512.h"
#include "kv/attention_internal.h"
#include "kv/attention_prefetch.h"

namespace omnibus::attn::avx512 {
namespace {

// Rows as stored: f32, or f16 converted on load (exactly, so the same values
// as a widened tile's and the same arithmetic after).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 8 elements of row lo (low half) and of row hi (high half).
inline __m512 load_pair8(const float* lo, const float* hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)), _mm256_loadu_ps(hi), 1);
}
inline __m512 load_pair8(const uint16_t* lo, const uint16_t* hi) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
  return _mm512_cvtph_ps(h);
}

// ops_vec_avx2.h's exp_ps, hmax_ps and hsum_ps on 16 lanes, op for op
// (kernels/ops_vec_avx512.h: so lane for lane the same).
using omnibus::avx512::exp_ps;
using omnibus::avx512::hmax_ps;
using omnibus::avx512::hsum_ps;

// attention_avx2.cc's softmax_update for the N queries of a group at once
// (each query's operations exactly those of its own call there): scores
// dots[n] of the tile's keys [a, b) in, probabilities out (masked lanes 0),
// alpha[n] the factor of query n's old accumulator. The N queries' steps
// are independent, so they are written side by side: one query's
// horizontal max and sum (latency-bound) overlap the next one's exp; the
// alphas (std::exp, as avx2's) are taken together, while no vector is live
// across the calls. A full tile (every group live) skips the masks, whose
// blend and zeroing are then no-ops: the same bits.
template <int N>
void softmax_n(AttnQuery* qs, float (*dots)[kAttnTile], int a, int b, const AttentionParams& p,
               float* alpha) {
  static_assert(kAttnTile == 32, "two zmm a tile");
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const bool full = a == 0 && b == kAttnTile;
  const uint32_t in = (b >= 32 ? ~0u : (1u << b) - 1) & ~((1u << a) - 1);  // lanes in [a, b)
  uint32_t live = 0;  // the 8-lane groups avx2 computes: those meeting [a, b)
  for (int g = 0; g < kAttnTile; g += 8) {
    if (!(g + 8 <= a || g >= b)) live |= 0xffu << g;
  }
  const __m512 vscale = _mm512_set1_ps(p.scale);
  float m_new[N];
  for (int n = 0; n < N; ++n) {
    __m512 x[2];
    for (int h = 0; h < 2; ++h) {
      x[h] = _mm512_mul_ps(_mm512_load_ps(dots[n] + 16 * h), vscale);
      if (p.softcap > 0.f) {
        alignas(64) float tmp[16];
        _mm512_store_ps(tmp, x[h]);
        for (float& v : tmp) v = p.softcap * std::tanh(v / p.softcap);
        x[h] = _mm512_load_ps(tmp);
      }
      if (!full) x[h] = _mm512_mask_blend_ps(__mmask16(in >> (16 * h)), neg_inf, x[h]);
      _mm512_store_ps(dots[n] + 16 * h, x[h]);
    }
    __m256 vmax = _mm256_set1_ps(-INFINITY);  // groups in order, as avx2's
    for (int h = 0; h < 2; ++h) {
      vmax = _mm256_max_ps(vmax, _mm512_castps512_ps256(x[h]));
      vmax = _mm256_max_ps(vmax, _mm512_extractf32x8_ps(x[h], 1));
    }
    m_new[n] = std::max(qs[n].m, hmax_ps(vmax));
  }
  for (int n = 0; n < N; ++n) alpha[n] = std::exp(qs[n].m - m_new[n]);
  for (int n = 0; n < N; ++n) {
    const __m512 vm = _mm512_set1_ps(m_new[n]);
    __m256 vsum = _mm256_setzero_ps();
    for (int h = 0; h < 2; ++h) {
      const __mmask16 k = __mmask16(live >> (16 * h));
      __m512 e = exp_ps(_mm512_sub_ps(_mm512_load_ps(dots[n] + 16 * h), vm));
      if (!full) e = _mm512_maskz_mov_ps(k, e);
      _mm512_store_ps(dots[n] + 16 * h, e);
      if (k & 0xff) vsum = _mm256_add_ps(vsum, _mm512_castps512_ps256(e));
      if (k & 0xff00) vsum = _mm256_add_ps(vsum, _mm512_extractf32x8_ps(e, 1));
    }
    qs[n].l = std::fma(qs[n].l, alpha[n], hsum_ps(vsum));  // one rounding, as avx2's
    qs[n].m = m_new[n];
  }
}

// _mm256_hadd_ps on each half of two zmm: per 128-bit lane [a0 + a1, a2 + a3,
// b0 + b1, b2 + b3] (a sum's operands in either order: the same bits).
inline __m512 hadd512(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// transpose_sum8 of a query's 8 rows held as scores_n keeps them (acc[r]:
// row r in the low half, row r + 4 in the high), the same additions in the
// same tree on whole zmm: 128-bit lanes [rows 0-3 of elements 0-3 | of
// 4-7 | rows 4-7 of 0-3 | of 4-7], each row's (x0 + x1) + (x2 + x3), to be
// added lane 0 + lane 1 and lane 2 + lane 3 as transpose_sum8's lo + hi.
inline __m512 half_sums8(const __m512 acc[4]) {
  return hadd512(hadd512(acc[0], acc[1]), hadd512(acc[2], acc[3]));
}

// The calling thread's queue (attention_prefetch.h) as a tile's loops use
// it: its pending lines counted once, so that once they are out a step
// skips prefetch_next's checks (which cost ~5% of a prompt chunk's
// attention, its queue empty early in most tiles). The same lines in the
// same order as calling prefetch_next every step.
struct PfCursor {
  AttnPrefetchQueue& q;
  int left;
  void next() {
    if (left > 0) {
      --left;
      prefetch_next(q);
    }
  }
};

template <int N, class R>
void scores_n(const float* const* q, const R* const* kr, const R* zero, int a, int b, int hd,
              float* dots, PfCursor& pf) {
  for (int g = 0; g < kAttnTile; g += 8) {
    if (g + 8 <= a || g >= b) continue;
    const R* rows[8];
    for (int r = 0; r < 8; ++r) rows[r] = (g + r >= a && g + r < b) ? kr[g + r] : zero;
    __m512 acc[N][4];
    for (int n = 0; n < N; ++n) {
      for (int r = 0; r < 4; ++r) acc[n][r] = _mm512_setzero_ps();
    }
    for (int d = 0; d < hd; d += 8) {
      pf.next();  // two lines a step, as attention_avx2.cc's two passes issue
      pf.next();
      __m512 qv[N];
      for (int n = 0; n < N; ++n) qv[n] = _mm512_broadcast_f32x8(_mm256_loadu_ps(q[n] + d));
      for (int r = 0; r < 4; ++r) {  // rows r (low half) and r + 4 (high half)
        const __m512 kv = load_pair8(rows[r] + d, rows[r + 4] + d);
        for (int n = 0; n < N; ++n) acc[n][r] = _mm512_fmadd_ps(qv[n], kv, acc[n][r]);
      }
    }
    // Two queries' half sums finished in one add: [n's rows 0-7 | m's].
    for (int n = 0; n + 1 < N; n += 2) {
      const __m512 h0 = half_sums8(acc[n]), h1 = half_sums8(acc[n + 1]);
      const __m512 o = _mm512_add_ps(_mm512_shuffle_f32x4(h0, h1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(h0, h1, _MM_SHUFFLE(3, 1, 3, 1)));
      _mm256_store_ps(dots + n * kAttnTile + g, _mm512_castps512_ps256(o));
      _mm256_store_ps(dots + (n + 1) * kAttnTile + g, _mm512_extractf32x8_ps(o, 1));
    }
    if constexpr (N % 2 == 1) {
      const __m512 h = half_sums8(acc[N - 1]);
      const __m512 o = _mm512_add_ps(_mm512_shuffle_f32x4(h, h, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(h, h, _MM_SHUFFLE(3, 1, 3, 1)));
      _mm256_store_ps(dots + (N - 1) * kAttnTile + g, _mm512_castps512_ps256(o));
    }
  }
}

// Elements [d, d + 16 W) of the N accumulators, over the tile's keys [a, b).
template <int N, int W, class R>
inline void pv_chunk(float* const* acc, const float* alpha, const float* const* p,
                     const R* const* rows, int a, int b, int d, PfCursor& pf) {
  __m512 x[N][W];
  for (int n = 0; n < N; ++n) {
    const __m512 va = _mm512_set1_ps(alpha[n]);
    for (int k = 0; k < W; ++k) x[n][k] = _mm512_mul_ps(_mm512_loadu_ps(acc[n] + d + 16 * k), va);
  }
  for (int j = a; j < b; ++j) {
    for (int k = 0; k < (W + 1) / 2; ++k) pf.next();  // a line per 32 elements, as avx2
    __m512 pj[N];
    for (int n = 0; n < N; ++n) pj[n] = _mm512_set1_ps(p[n][j]);
    const R* r = rows[j] + d;
    for (int k = 0; k < W; ++k) {
      const __m512 v = load16(r + 16 * k);
      for (int n = 0; n < N; ++n) x[n][k] = _mm512_fmadd_ps(pj[n], v, x[n][k]);
    }
  }
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < W; ++k) _mm512_storeu_ps(acc[n] + d + 16 * k, x[n][k]);
  }
}

template <int N, class R>
void pv_n(float* const* acc, const float* alpha, const float* const* p, const R* const* rows, int a,
          int b, int hd, PfCursor& pf) {
  constexpr int W = N == 1 ? 8 : 4;  // N W accumulators + N broadcasts in 32 registers
  int d = 0;
  for (; d + 16 * W <= hd; d += 16 * W) pv_chunk<N, W, R>(acc, alpha, p, rows, a, b, d, pf);
  for (; d + 16 <= hd; d += 16) pv_chunk<N, 1, R>(acc, alpha, p, rows, a, b, d, pf);
  for (; d < hd; d += 8) {  // head_dim % 16 == 8
    __m256 x[N];
    for (int n = 0; n < N; ++n)
      x[n] = _mm256_mul_ps(_mm256_loadu_ps(acc[n] + d), _mm256_set1_ps(alpha[n]));
    for (int j = a; j < b; ++j) {
      const __m256 v = load8(rows[j] + d);
      for (int n = 0; n < N; ++n) x[n] = _mm256_fmadd_ps(_mm256_set1_ps(p[n][j]), v, x[n]);
    }
    for (int n = 0; n < N; ++n) _mm256_storeu_ps(acc[n] + d, x[n]);
  }
}

// Scores, the softmax step and P.V of N queries through the tile.
template <int N, class R>
void tile_n(AttnQuery* qs, float* const* acc, int a, int b, const AttentionParams& p,
            const R* const* kr, const R* const* vr, const R* zero, int hd,
            AttnPrefetchQueue& queue) {
  alignas(64) float dots[N][kAttnTile];
  const float* q[N];
  for (int k = 0; k < N; ++k) q[k] = qs[k].q;
  PfCursor pf{queue, prefetch_pending(queue)};
  scores_n<N, R>(q, kr, zero, a, b, hd, &dots[0][0], pf);
  float alpha[N];
  softmax_n<N>(qs, dots, a, b, p, alpha);
  const float* pp[N];
  for (int k = 0; k < N; ++k) pp[k] = dots[k];
  pv_n<N, R>(acc, alpha, pp, vr, a, b, hd, pf);
}

template <class R>
void group_tile_rows(AttnQuery* qs, int n, float* const* acc, int a, int b,
                     const AttentionParams& p, const R* const* kr, const R* const* vr,
                     const R* zero, int hd, AttnPrefetchQueue& pf) {
  switch (n) {
    case 4:
      return tile_n<4, R>(qs, acc, a, b, p, kr, vr, zero, hd, pf);
    case 3:
      return tile_n<3, R>(qs, acc, a, b, p, kr, vr, zero, hd, pf);
    case 2:
      return tile_n<2, R>(qs, acc, a, b, p, kr, vr, zero, hd, pf);
    default:
      return tile_n<1, R>(qs, acc, a, b, p, kr, vr, zero, hd, pf);
  }
}

}  // namespace

void group_tile(AttnQuery* qs, int n, float* const* acc, int a, int b, const AttentionParams& p,
                const float* const* kr, const float* const* vr, const float* zero, int hd,
                AttnPrefetchQueue& pf) {
  group_tile_rows<float>(qs, n, acc, a, b, p, kr, vr, zero, hd, pf);
}

void group_tile(AttnQuery* qs, int n, float* const* acc, int a, int b, const AttentionParams& p,
                const uint16_t* const* kr, const uint16_t* const* vr, const uint16_t* zero, int hd,
                AttnPrefetchQueue& pf) {
  group_tile_rows<uint16_t>(qs, n, acc, a, b, p, kr, vr, zero, hd, pf);
}

}  // namespace omnibus::attn::avx512
