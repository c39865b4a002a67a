// AVX2 per-task kernel of paged attention (algorithm: attention_internal.h).
// Per tile of kAttnTile positions, the K/V row pointers are computed once per
// block for all the task's queries, and the next tiles' rows are prefetched
// (the pool is far larger than the caches at 64 sequences). Queries with the
// same visible keys in the tile (a decode token's GQA heads) go through it
// together, up to 3 at a time, so each K and V load -- and its conversion from
// f16 or int8 -- is shared: scores 8 keys at a time (one FMA chain per
// (query, key) over head_dim, then one transposing horizontal add), then each
// query's online-softmax step, then P.V with the accumulators in registers.
// A query's arithmetic never depends on which queries share its group.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/ops_vec_avx2.h"
#include "kv/attention_internal.h"
#include "kv/attention_prefetch.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_kivi.h"
#include "kv/kv_quant_paged.h"

namespace omnibus {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// q8 codes, unscaled.
inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Lane i of the result = sum of the 8 lanes of v[i], summed in one fixed order.
inline __m256 transpose_sum8(const __m256 v[8]) {
  const __m256 h01 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 h23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 h45 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 h67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23);  // [v0..v3 low halves | v0..v3 high halves]
  const __m256 h4567 = _mm256_hadd_ps(h45, h67);
  const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

// Lines of the tasks this thread is likely to run next
// (attention_prefetch_task_avx2), issued by the current task's queue.
thread_local AttnPrefetchQueue t_ahead;

// Dot products of N queries with 8 rows over elements [d0, d1), sharing
// each K load (and, for an f16 or q8 pool, its conversion) across the queries. Lane r of the result
// of query n is sum over d-vectors, in increasing d, of q_n[d..d+8) * rows[r], accumulated in one
// FMA chain per (n, r), then transpose_sum8: it depends on q_n and rows[r] only, so it is the same
// whatever N (and a masked key, pointed at a row of zeros, cannot disturb its neighbours). Rows are
// taken R at a time to keep N * R accumulators in registers.
template <typename T, int N>
inline void dot8_n(const float* const* q, const T* const rows[8], int d0, int d1, __m256* out,
                   AttnPrefetchQueue& pf) {
  constexpr int R = N == 1 ? 8 : 4;
  __m256 acc[N][8];
  for (int half = 0; half < 8; half += R) {
    __m256 a[N][R];
    for (int n = 0; n < N; ++n) {
      for (int r = 0; r < R; ++r) a[n][r] = _mm256_setzero_ps();
    }
    for (int d = d0; d < d1; d += 8) {
      prefetch_next(pf);
      __m256 qv[N];
      for (int n = 0; n < N; ++n) qv[n] = _mm256_loadu_ps(q[n] + d);
      for (int r = 0; r < R; ++r) {
        const __m256 kv = load8(rows[half + r] + d);
        for (int n = 0; n < N; ++n) a[n][r] = _mm256_fmadd_ps(qv[n], kv, a[n][r]);
      }
    }
    for (int n = 0; n < N; ++n) {
      for (int r = 0; r < R; ++r) acc[n][half + r] = a[n][r];
    }
  }
  for (int n = 0; n < N; ++n) out[n] = transpose_sum8(acc[n]);
}

// For each of N queries: acc_n[d0..d1) = acc_n * alpha_n + sum_{j in [a, b)}
// p_n[j] * rows[j], j increasing, one FMA chain per output lane (the same
// per lane whatever N and the chunking of d). Each V load (and conversion)
// is shared by the N queries; W vectors of each query's accumulator are kept
// in registers per pass over the rows (W = 4 where d1 - d0 is a q8 group of 32).
template <typename T, int N, int W = N == 1 ? 8 : 4>
inline void pv_update_n(float* const* acc, const float* alpha, const float* const* p,
                        const T* const* rows, int a, int b, int d0, int d1, AttnPrefetchQueue& pf) {
  int d = d0;
  for (; d + 8 * W <= d1; d += 8 * W) {
    __m256 x[N][W];
    for (int n = 0; n < N; ++n) {
      const __m256 va = _mm256_set1_ps(alpha[n]);
      for (int k = 0; k < W; ++k) x[n][k] = _mm256_mul_ps(_mm256_loadu_ps(acc[n] + d + 8 * k), va);
    }
    for (int j = a; j < b; ++j) {
      prefetch_next(pf);
      __m256 pj[N];
      for (int n = 0; n < N; ++n) pj[n] = _mm256_broadcast_ss(p[n] + j);
      const T* r = rows[j] + d;
      for (int k = 0; k < W; ++k) {
        const __m256 v = load8(r + 8 * k);
        for (int n = 0; n < N; ++n) x[n][k] = _mm256_fmadd_ps(pj[n], v, x[n][k]);
      }
    }
    for (int n = 0; n < N; ++n) {
      for (int k = 0; k < W; ++k) _mm256_storeu_ps(acc[n] + d + 8 * k, x[n][k]);
    }
  }
  for (; d < d1; d += 8) {
    __m256 x[N];
    for (int n = 0; n < N; ++n)
      x[n] = _mm256_mul_ps(_mm256_loadu_ps(acc[n] + d), _mm256_set1_ps(alpha[n]));
    for (int j = a; j < b; ++j) {
      const __m256 v = load8(rows[j] + d);
      for (int n = 0; n < N; ++n) x[n] = _mm256_fmadd_ps(_mm256_broadcast_ss(p[n] + j), v, x[n]);
    }
    for (int n = 0; n < N; ++n) _mm256_storeu_ps(acc[n] + d, x[n]);
  }
}

// An fp16 value at p (any alignment), converted exactly.
inline float ld_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One online-softmax step of a query over the tile's visible keys [a, b):
// dots holds their raw q.k (other lanes are ignored) and gets their
// probabilities (masked lanes 0); returns alpha, the factor of the old
// accumulator.
inline float softmax_update(AttnQuery& st, float* dots, int a, int b, const AttentionParams& p) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 vscale = _mm256_set1_ps(p.scale);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256 vmax = neg_inf;
  for (int g = 0; g < kAttnTile; g += 8) {
    __m256 x = neg_inf;
    if (!(g + 8 <= a || g >= b)) {
      x = _mm256_mul_ps(_mm256_load_ps(dots + g), vscale);
      if (p.softcap > 0.f) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, x);
        for (float& v : tmp) v = p.softcap * std::tanh(v / p.softcap);
        x = _mm256_load_ps(tmp);
      }
      // keep lanes g + r in [a, b)
      const __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(a - g), lane),
                                             _mm256_cmpgt_epi32(_mm256_set1_epi32(b - g), lane));
      x = _mm256_blendv_ps(neg_inf, x, _mm256_castsi256_ps(in));
    }
    _mm256_store_ps(dots + g, x);
    vmax = _mm256_max_ps(vmax, x);
  }
  const float m_new = std::max(st.m, avx2::hmax_ps(vmax));
  const float alpha = std::exp(st.m - m_new);
  const __m256 vm = _mm256_set1_ps(m_new);
  __m256 vsum = _mm256_setzero_ps();
  for (int g = 0; g < kAttnTile; g += 8) {
    if (g + 8 <= a || g >= b) {  // all masked: exp(-inf) = 0
      _mm256_store_ps(dots + g, _mm256_setzero_ps());
      continue;
    }
    const __m256 e = avx2::exp_ps(_mm256_sub_ps(_mm256_load_ps(dots + g), vm));  // masked: 0
    _mm256_store_ps(dots + g, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  // One explicit rounding: left as a * b + c, GCC may or may not contract it
  // into an FMA depending on where this is inlined, and the bits would
  // depend on how many queries share the group.
  st.l = std::fma(st.l, alpha, avx2::hsum_ps(vsum));
  st.m = m_new;
  return alpha;
}

// N queries (qs[0..N)) with the same visible keys [a, b) of the tile and the
// same K/V rows: scores, softmax, P.V. Each query's arithmetic is that of N = 1.
// The q8 scales of a tile, transposed so that 8 rows' scales of one group
// are one vector: k[g * kAttnTile + j] is row j's K scale for channels
// [g * group, (g + 1) * group); 0 for rows outside the tile's range.
struct Q8TileScales {
  const float* k = nullptr;
  const float* v = nullptr;
  int group = 0, n_groups = 0;
};

// sc (q8 only, else ignored): the tile's scales. A q8 score is
// sum_g k_g * (q_g . codes_g), the group dot products in increasing g; a
// q8 row enters P.V group by group with weight p_j * v_jg (the products
// formed once per tile, not per element).
template <typename T, int N>
inline void group_tile(AttnQuery* qs, float* const* acc, int a, int b, const AttentionParams& p,
                       const T* const* kr, const T* const* vr, const T* zero_row, int hd,
                       const Q8TileScales& sc, AttnPrefetchQueue& pf) {
  constexpr bool kQ8Rows = std::is_same_v<T, int8_t>;
  alignas(32) float dots[N][kAttnTile];
  const float* q[N];
  for (int n = 0; n < N; ++n) q[n] = qs[n].q;
  for (int g = 0; g < kAttnTile; g += 8) {
    if (g + 8 <= a || g >= b) continue;
    const T* rows[8];
    for (int r = 0; r < 8; ++r) rows[r] = (g + r >= a && g + r < b) ? kr[g + r] : zero_row;
    __m256 o[N];
    if constexpr (kQ8Rows) {  // masked lanes: codes 0
      for (int n = 0; n < N; ++n) o[n] = _mm256_setzero_ps();
      for (int gi = 0; gi < sc.n_groups; ++gi) {
        __m256 part[N];
        dot8_n<T, N>(q, rows, gi * sc.group, (gi + 1) * sc.group, part, pf);
        const __m256 s8 = _mm256_loadu_ps(sc.k + gi * kAttnTile + g);
        for (int n = 0; n < N; ++n) o[n] = _mm256_fmadd_ps(part[n], s8, o[n]);
      }
    } else {
      dot8_n<T, N>(q, rows, 0, hd, o, pf);
    }
    for (int n = 0; n < N; ++n) _mm256_store_ps(dots[n] + g, o[n]);
  }
  float alpha[N];
  for (int n = 0; n < N; ++n) alpha[n] = softmax_update(qs[n], dots[n], a, b, p);
  const float* pp[N];
  if constexpr (kQ8Rows) {
    alignas(32) float pg[N][kAttnTile];  // p_j * v_jg of one group
    for (int gi = 0; gi < sc.n_groups; ++gi) {
      for (int n = 0; n < N; ++n) {
        for (int j = 0; j < kAttnTile; j += 8) {
          _mm256_store_ps(pg[n] + j, _mm256_mul_ps(_mm256_load_ps(dots[n] + j),
                                                   _mm256_loadu_ps(sc.v + gi * kAttnTile + j)));
        }
        pp[n] = pg[n];
      }
      if (sc.group == 32) {
        pv_update_n<T, N, 4>(acc, alpha, pp, vr, a, b, gi * 32, gi * 32 + 32, pf);
      } else {
        pv_update_n<T, N>(acc, alpha, pp, vr, a, b, 0, hd, pf);
      }
    }
  } else {
    for (int n = 0; n < N; ++n) pp[n] = dots[n];
    pv_update_n<T, N>(acc, alpha, pp, vr, a, b, 0, hd, pf);
  }
}

// Asks for the K and V bytes of rows [j0, j1) of KV head h (the next tile)
// while the current one is computed: at 64 sequences the pool is far larger
// than the caches and its blocks lie scattered, so without this every tile
// starts with cache misses. elem: bytes per element of an f32/f16 pool (just
// the rows' range is fetched), 0 for a quantized one (whole units: a block's
// rows, scales and stats). Prefetches have no effect on the results.
inline void prefetch_rows(const PagedKvLayer& kv, const AttentionSeq& s, int h, int32_t j0,
                          int32_t j1, size_t elem, const KvUnitBytes& ub,
                          AttnPrefetchQueue* queue = nullptr) {
  const int bs = kv.block_size;
  const size_t row_bytes = elem * static_cast<size_t>(kv.head_dim);
  for (int32_t j = j0; j < j1;) {
    const int32_t blk = j / bs, end = std::min(j1, (blk + 1) * bs);
    const size_t unit = static_cast<size_t>(s.block_table[blk]) * kv.n_kv_heads + h;
    for (int is_v = 0; is_v < 2; ++is_v) {
      const size_t unit_bytes = is_v ? ub.v : ub.k;
      const char* u = static_cast<const char*>(is_v ? kv.v : kv.k) + unit * unit_bytes;
      const uintptr_t lo = reinterpret_cast<uintptr_t>(u) + (elem ? (j - blk * bs) * row_bytes : 0);
      const uintptr_t hi =
          reinterpret_cast<uintptr_t>(u) + (elem ? (end - blk * bs) * row_bytes : unit_bytes);
      for (uintptr_t a = lo & ~uintptr_t{63}; a < hi; a += 64) {
        if (queue != nullptr) {
          prefetch_add(*queue, reinterpret_cast<const char*>(a));
        } else {
          _mm_prefetch(reinterpret_cast<const char*>(a), kAttnPrefetchHint);
        }
      }
    }
    j = end;
  }
}

// Pool formats, by how the kernel reads rows:
//   kInPlace (f32, f16): rows read where they are (f16 converted in registers);
//   kQ8: int8 codes read where they are; a score sums the group dot products
//     times their scales, and P.V takes each group with p_j times its scale
//     (a tile's scales converted once, transposed: Q8TileScales);
//   kQuant (q4, kivi2; T = float): each tile's rows are dequantized once into
//     f32 tiles shared by the task's queries; the rows of open groups are also
//     converted from their fp16 residual, and each query picks per row which
//     of the two it reads (its qlim). kivi2 values are stored rotated
//     (kv_quant.h): the output is rotated back once per query.
enum { kInPlace, kQ8, kQuant };

template <typename T, int kMode>
void task_avx2(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
               const AttentionParams& p, const AttnTask& t, float* out, bool wide) {
  const int hd = p.head_dim;
  const int n_rep = p.n_head / p.n_kv_head;
  const int kvh = t.head0 / n_rep;
  const int n_q = t.n_tok * t.n_heads;
  const T* kpool = static_cast<const T*>(kv.k);
  const T* vpool = static_cast<const T*>(kv.v);
  const bool kivi = kv_has_residual(kv.format);  // q4, kivi2: open groups read in fp16

  thread_local std::vector<float> acc_buf;
  thread_local std::vector<float>
      tiles;  // kQuant: K, V quantized views, K, V fp16 views [kAttnTile, hd]
  const size_t tile_elems = static_cast<size_t>(kAttnTile) * hd;
  if (kMode == kQuant && tiles.size() < 4 * tile_elems) tiles.resize(4 * tile_elems);
  // f16 rows read by more than 4 queries (a prompt chunk's): widened to f32
  // tiles once per tile instead (exact, so the same arithmetic and bits). A
  // decode's 4 GQA queries read them as stored, converting on load, in one
  // group (avx512) or two (avx2): Llama-1B-shaped decode attention, 1
  // thread, widened first 3.2-3.4 / 4.2-4.4 ms, as stored 2.2 / 2.9-3.1 (Xeon).
  const bool widen = std::is_same_v<T, uint16_t> && kMode == kInPlace && n_q > 4;
  if (widen && tiles.size() < 2 * tile_elems) tiles.resize(2 * tile_elems);
  const float* krows32[kAttnTile];
  const float* vrows32[kAttnTile];
  thread_local std::vector<float> zero_row32;
  if (widen && zero_row32.size() < static_cast<size_t>(hd)) zero_row32.assign(hd, 0.f);
  // Groups of rows (f32 or f16 as stored, widened or dequantized: every mode
  // but q8's) through the avx512 tier's tile kernel, up to 4 queries at a time.
  const bool wide_rows = wide && kMode != kQ8;
  const int max_group = wide_rows ? 4 : 3;
  thread_local std::vector<AttnQuery> qs;
  thread_local std::vector<float> q_rot;  // kQ8: the queries rotated (keys are stored as H k)
  if (kMode == kQ8) q_rot.resize(static_cast<size_t>(n_q) * hd);
  thread_local std::vector<T> zero_row;
  if (zero_row.size() < static_cast<size_t>(hd)) zero_row.assign(hd, T(0));
  acc_buf.assign(static_cast<size_t>(n_q) * hd, 0.f);
  qs.resize(n_q);
  int32_t task_lo = INT32_MAX, task_hi = 0;
  for (int ti = 0; ti < t.n_tok; ++ti) {
    const int32_t tok = t.tok0 + ti;
    int32_t lo, hi;
    attn_visible_range(s, s.n_past + tok, &lo, &hi);
    task_lo = std::min(task_lo, lo);
    task_hi = std::max(task_hi, hi);
    for (int hi_ = 0; hi_ < t.n_heads; ++hi_) {
      const int64_t row = static_cast<int64_t>(s.first_token + tok) * p.n_head + t.head0 + hi_;
      const int32_t pos = s.n_past + tok;
      const int32_t qlim =
          kivi ? kivi_qlim(pos, kv.block_size, kv.kivi->residual_blocks()) : INT32_MAX;
      const float* qrow = q + row * hd;
      if (kMode == kQ8) {  // q . k = (H q) . (H k): H is orthonormal and symmetric
        float* r = q_rot.data() + static_cast<size_t>(ti * t.n_heads + hi_) * hd;
        std::copy_n(qrow, hd, r);
        kv_hadamard(r, hd);
        qrow = r;
      }
      qs[ti * t.n_heads + hi_] = AttnQuery{qrow, out + row * hd, -INFINITY, 0.f, lo, hi, qlim};
    }
  }

  const T* krows[kAttnTile];
  const T* vrows[kAttnTile];
  const T* krows_f[kAttnTile];  // kivi2: fp16 view (as f32) of open-group rows, else nullptr
  const T* vrows_f[kAttnTile];
  const T* ksel[kAttnTile];
  const T* vsel[kAttnTile];
  // kQ8: the tile's scales, K then V, [n_groups][kAttnTile] each.
  thread_local std::vector<float> q8_scales;
  Q8TileScales sc;
  if (kMode == kQ8) {
    sc.group = kv_q8_group(hd);
    sc.n_groups = hd / sc.group;
    q8_scales.resize(size_t(2) * kAttnTile * sc.n_groups);
    sc.k = q8_scales.data();
    sc.v = sc.k + size_t(kAttnTile) * sc.n_groups;
  }
  int32_t min_qlim = INT32_MAX, max_qlim = 0;
  for (int qi = 0; qi < n_q; ++qi) {
    min_qlim = std::min(min_qlim, qs[qi].qlim);
    max_qlim = std::max(max_qlim, qs[qi].qlim);
  }
  const KvUnitBytes ub = kv_unit_bytes(kv.format, kv.block_size, hd);
  thread_local AttnPrefetchQueue pfq;
  pfq.n = pfq.i = 0;
  pfq.then = &t_ahead;
  const int64_t head_stride = static_cast<int64_t>(kv.block_size) * hd;
  const int64_t block_stride = kv.n_kv_heads * head_stride;

  for (int32_t base = task_lo / kAttnTile * kAttnTile; base < task_hi; base += kAttnTile) {
    const int32_t ta = std::max(task_lo, base), tb = std::min(task_hi, base + kAttnTile);
    // Two tiles ahead (the first two at the task's start).
    const int32_t pf0 = base == task_lo / kAttnTile * kAttnTile ? tb : base + 2 * kAttnTile;
    const int32_t pf1 = std::min(task_hi, base + 3 * kAttnTile);
    prefetch_flush(pfq);  // what the last tile did not issue
    if (pf0 < pf1) prefetch_rows(kv, s, kvh, pf0, pf1, kMode != kInPlace ? 0 : sizeof(T), ub, &pfq);
    if constexpr (kMode == kQ8) {
      float* kst = q8_scales.data();
      float* vst = kst + size_t(kAttnTile) * sc.n_groups;
      std::fill(q8_scales.begin(), q8_scales.end(), 0.f);
      for (int32_t j = ta; j < tb;) {
        const int32_t blk = j / kv.block_size, end = std::min(tb, (blk + 1) * kv.block_size);
        const size_t unit = static_cast<size_t>(s.block_table[blk]) * kv.n_kv_heads + kvh;
        const T* ku = kpool + unit * ub.k;
        const T* vu = vpool + unit * ub.v;
        const size_t scales = kv_row_codes_bytes(kv.block_size, hd, 8);
        for (int r = j - blk * kv.block_size; j < end; ++j, ++r) {
          const size_t u_off = scales + size_t(2) * r * sc.n_groups;
          krows[j - base] = ku + static_cast<size_t>(r) * hd;
          vrows[j - base] = vu + static_cast<size_t>(r) * hd;
          for (int gi = 0; gi < sc.n_groups; ++gi) {
            kst[gi * kAttnTile + (j - base)] = ld_f16(ku + u_off + 2 * gi);
            vst[gi * kAttnTile + (j - base)] = ld_f16(vu + u_off + 2 * gi);
          }
        }
      }
    } else if constexpr (kMode == kInPlace) {
      for (int32_t j = ta; j < tb;) {  // block by block: no division per row
        const int32_t blk = j / kv.block_size, end = std::min(tb, (blk + 1) * kv.block_size);
        const int64_t off = s.block_table[blk] * block_stride + kvh * head_stride +
                            static_cast<int64_t>(j - blk * kv.block_size) * hd;
        for (int32_t j0 = j; j < end; ++j) {
          krows[j - base] = kpool + off + static_cast<int64_t>(j - j0) * hd;
          vrows[j - base] = vpool + off + static_cast<int64_t>(j - j0) * hd;
        }
      }
      if constexpr (std::is_same_v<T, uint16_t>) {
        if (widen) {  // many queries: each K/V row converted once, not once per query group
          float* kt = tiles.data();
          float* vt = kt + tile_elems;
          for (int32_t jj = ta; jj < tb; ++jj) {
            float* kd = kt + static_cast<size_t>(jj - base) * hd;
            float* vd = vt + static_cast<size_t>(jj - base) * hd;
            load_f16_avx2(krows[jj - base], kd, hd);
            load_f16_avx2(vrows[jj - base], vd, hd);
            krows32[jj - base] = kd;
            vrows32[jj - base] = vd;
          }
        }
      }
    } else {
      float* kt = tiles.data();
      float* vt = kt + tile_elems;
      float* kft = vt + tile_elems;
      float* vft = kft + tile_elems;
      // Rows every query reads in fp16 (at or above every qlim) need no quantized view.
      const int32_t qa = ta, qb = kivi ? std::max(ta, std::min(tb, max_qlim)) : tb;
      kv_dequant_rows_avx2(kv, s, false, kvh, qa, qb, kt + static_cast<size_t>(qa - base) * hd);
      kv_dequant_rows_avx2(kv, s, true, kvh, qa, qb, vt + static_cast<size_t>(qa - base) * hd);
      for (int32_t j = ta; j < tb; ++j) {
        krows[j - base] = kt + static_cast<size_t>(j - base) * hd;
        vrows[j - base] = vt + static_cast<size_t>(j - base) * hd;
        krows_f[j - base] = vrows_f[j - base] = nullptr;
      }
      if (kivi) {
        for (int32_t j = std::max(ta, min_qlim); j < tb; ++j) {
          const uint16_t* kr = kivi_f16_row(kv, s, kvh, j, false);
          const uint16_t* vr = kivi_f16_row(kv, s, kvh, j, true);
          if (kr == nullptr || vr == nullptr) {
            if (j >=
                qb) {  // no fp16 copy (per-token keys): the quantized view is what everyone reads
              kv_dequant_rows_avx2(kv, s, false, kvh, j, j + 1,
                                   kt + static_cast<size_t>(j - base) * hd);
              kv_dequant_rows_avx2(kv, s, true, kvh, j, j + 1,
                                   vt + static_cast<size_t>(j - base) * hd);
            }
            continue;
          }
          float* kd = kft + static_cast<size_t>(j - base) * hd;
          float* vd = vft + static_cast<size_t>(j - base) * hd;
          load_f16_avx2(kr, kd, hd);
          load_f16_avx2(vr, vd, hd);
          krows_f[j - base] = kd;
          vrows_f[j - base] = vd;
        }
      }
    }
    // Queries with the same visible range in this tile (the heads of one
    // token, always) go through it together, up to max_group at a time,
    // sharing each K/V load; each query's arithmetic is the same either way.
    for (int qi = 0; qi < n_q;) {
      const int a = std::max(qs[qi].lo, base) - base,
                b = std::min(qs[qi].hi, base + kAttnTile) - base;
      if (a >= b) {
        ++qi;
        continue;
      }
      const auto clip_qlim = [&](int32_t x) { return std::clamp(x, base, base + kAttnTile); };
      int n = 1;
      while (n < max_group && qi + n < n_q && std::max(qs[qi + n].lo, base) - base == a &&
             std::min(qs[qi + n].hi, base + kAttnTile) - base == b &&
             clip_qlim(qs[qi + n].qlim) == clip_qlim(qs[qi].qlim)) {
        ++n;
      }
      if (max_group == 3 && n == 3 && qi + 3 < n_q && n_q - qi == 4) n = 2;  // 2 + 2, not 3 + 1
      const T* const* kr = krows;
      const T* const* vr = vrows;
      if (kMode == kQuant && kivi) {
        const int32_t ql = qs[qi].qlim;
        for (int j = a; j < b; ++j) {
          const bool f = base + j >= ql && krows_f[j] != nullptr;
          ksel[j] = f ? krows_f[j] : krows[j];
          vsel[j] = f ? vrows_f[j] : vrows[j];
        }
        kr = ksel;
        vr = vsel;
      }
      float* acc[4];
      for (int k = 0; k < n; ++k) acc[k] = &acc_buf[static_cast<size_t>(qi + k) * hd];
      // The group through the tile, its rows as stored (R = T) or widened (R = float).
      auto run = [&]<typename R>(const R* const* kr_, const R* const* vr_, const R* zero) {
        if constexpr (std::is_same_v<R, float> || std::is_same_v<R, uint16_t>) {
          if (wide_rows)
            return attn::avx512::group_tile(&qs[qi], n, acc, a, b, p, kr_, vr_, zero, hd, pfq);
        }
        if (n == 3) return group_tile<R, 3>(&qs[qi], acc, a, b, p, kr_, vr_, zero, hd, sc, pfq);
        if (n == 2) return group_tile<R, 2>(&qs[qi], acc, a, b, p, kr_, vr_, zero, hd, sc, pfq);
        group_tile<R, 1>(&qs[qi], acc, a, b, p, kr_, vr_, zero, hd, sc, pfq);
      };
      if (widen) {
        run(krows32, vrows32, zero_row32.data());
      } else {
        run(kr, vr, zero_row.data());
      }
      qi += n;
    }
  }

  for (int qi = 0; qi < n_q; ++qi) {
    const float* acc = &acc_buf[static_cast<size_t>(qi) * hd];
    const __m256 inv = _mm256_set1_ps(1.f / qs[qi].l);
    for (int d = 0; d < hd; d += 8)
      _mm256_storeu_ps(qs[qi].out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
    // kivi2 values (quantized and fp16 alike) are H v: sum p_j H v_j = H out.
    // q8 values likewise.
    if ((kMode == kQuant && kv_rotates_v(kv.format)) || kMode == kQ8) kv_hadamard(qs[qi].out, hd);
  }
  prefetch_flush(t_ahead);
}

}  // namespace

void attention_task_avx2(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                         const AttentionParams& p, const AttnTask& t, float* out, bool wide) {
  if (kv.format == KvFormat::kF32) return task_avx2<float, kInPlace>(q, kv, s, p, t, out, wide);
  if (kv.format == KvFormat::kF16) {
    return task_avx2<uint16_t, kInPlace>(q, kv, s, p, t, out, wide);
  }
  if (kv.format == KvFormat::kQ8) return task_avx2<int8_t, kQ8>(q, kv, s, p, t, out, wide);
  task_avx2<float, kQuant>(q, kv, s, p, t, out, wide);
}

void attention_prefetch_task_avx2(const PagedKvLayer& kv, const AttentionSeq& s,
                                  const AttentionParams& p, const AttnTask& t) {
  int32_t lo, hi;
  attn_visible_range(s, s.n_past + t.tok0, &lo, &hi);  // the first token has the lowest lo
  const int32_t task_hi = s.bidirectional ? hi : s.n_past + t.tok0 + t.n_tok;
  const int32_t j1 = std::min(task_hi, lo / kAttnTile * kAttnTile + kAttnTile);
  const size_t elem = kv.format == KvFormat::kF32 ? 4 : kv.format == KvFormat::kF16 ? 2 : 0;
  prefetch_rows(kv, s, t.head0 / (p.n_head / p.n_kv_head), lo, j1, elem,
                kv_unit_bytes(kv.format, kv.block_size, kv.head_dim), &t_ahead);
}

void load_f16_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}

void store_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) {
    dst[i] = static_cast<uint16_t>(_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT));
  }
}

}  // namespace omnibus
