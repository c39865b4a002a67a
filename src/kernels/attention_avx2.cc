// AVX2 per-task kernel of paged attention (algorithm: attention_internal.h).
// Per tile of kAttnTile positions, each K/V row pointer is computed once for
// all the task's queries; scores come 8 keys at a time (8 FMA chains over
// head_dim, then one transposing horizontal add), and the P.V update keeps 64
// output dims in registers while it walks the tile's rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_internal.h"
#include "kernels/kv_quant.h"
#include "kernels/kv_quant_kivi.h"
#include "kernels/kv_quant_paged.h"
#include "kernels/ops_vec_avx2.h"

namespace omnibus {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
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

// Dot products of q with 8 rows. Lane r depends on rows[r] only, so a
// masked key (pointed at a row of zeros) cannot disturb its neighbours.
template <typename T>
inline __m256 dot8(const float* q, const T* const rows[8], int hd) {
  __m256 acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
  for (int d = 0; d < hd; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, load8(rows[r] + d), acc[r]);
  }
  return transpose_sum8(acc);
}

// acc[0..hd) = acc * alpha + sum_{j in [a, b)} p[j] * rows[j], j increasing.
template <typename T>
inline void pv_update(float* acc, float alpha, const float* p, const T* const* rows, int a, int b, int hd) {
  const __m256 va = _mm256_set1_ps(alpha);
  int d = 0;
  for (; d + 64 <= hd; d += 64) {
    __m256 x[8];
    for (int k = 0; k < 8; ++k) x[k] = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8 * k), va);
    for (int j = a; j < b; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const T* r = rows[j] + d;
      for (int k = 0; k < 8; ++k) x[k] = _mm256_fmadd_ps(pj, load8(r + 8 * k), x[k]);
    }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(acc + d + 8 * k, x[k]);
  }
  for (; d < hd; d += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(acc + d), va);
    for (int j = a; j < b; ++j) x = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load8(rows[j] + d), x);
    _mm256_storeu_ps(acc + d, x);
  }
}

struct QueryState {
  const float* q;
  float* out;
  float m, l;
  int32_t lo, hi;  // visible positions [lo, hi)
  int32_t qlim;    // kivi2: keys below are read quantized, the rest (its open group) in fp16
};

// dot8 for two queries at once, sharing each K load: lane r of out0/out1 is
// bit-identical to dot8(q0 / q1, rows). Rows in two halves of 4 to keep the
// accumulators in registers.
template <typename T>
inline void dot8x2(const float* q0, const float* q1, const T* const rows[8], int hd, float* out0, float* out1) {
  __m256 acc0[8], acc1[8];
  for (int half = 0; half < 8; half += 4) {
    __m256 a0[4], a1[4];
    for (int r = 0; r < 4; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      const __m256 qv0 = _mm256_loadu_ps(q0 + d);
      const __m256 qv1 = _mm256_loadu_ps(q1 + d);
      for (int r = 0; r < 4; ++r) {
        const __m256 kv = load8(rows[half + r] + d);
        a0[r] = _mm256_fmadd_ps(qv0, kv, a0[r]);
        a1[r] = _mm256_fmadd_ps(qv1, kv, a1[r]);
      }
    }
    for (int r = 0; r < 4; ++r) {
      acc0[half + r] = a0[r];
      acc1[half + r] = a1[r];
    }
  }
  _mm256_store_ps(out0, transpose_sum8(acc0));
  _mm256_store_ps(out1, transpose_sum8(acc1));
}

// One online-softmax step of a query over the tile's visible keys [a, b):
// dots holds their raw q.k (other lanes are ignored).
template <typename T>
inline void softmax_update(QueryState& st, float* dots, int a, int b, const AttentionParams& p, float* acc,
                           const T* const* vrows, int hd) {
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
    const __m256 e = avx2::exp_ps(_mm256_sub_ps(_mm256_load_ps(dots + g), vm));  // masked: 0
    _mm256_store_ps(dots + g, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  st.l = st.l * alpha + avx2::hsum_ps(vsum);
  st.m = m_new;
  pv_update(acc, alpha, dots, vrows, a, b, hd);
}

// kQuant: the pool holds a quantized format (T = float): each tile's rows are
// dequantized once into f32 tiles shared by the task's queries; for kivi2 the
// rows of open groups are also converted from their fp16 residual, and each
// query picks per row which of the two it reads (its qlim). kivi2 values are
// stored rotated (kv_quant.h): the output is rotated back once per query.
template <typename T, bool kQuant>
void task_avx2(const float* q, const PagedKvLayer& kv, const AttentionSeq& s, const AttentionParams& p,
               const AttnTask& t, float* out) {
  const int hd = p.head_dim;
  const int n_rep = p.n_head / p.n_kv_head;
  const int kvh = t.head0 / n_rep;
  const int n_q = t.n_tok * t.n_heads;
  const T* kpool = static_cast<const T*>(kv.k);
  const T* vpool = static_cast<const T*>(kv.v);
  const bool kivi = kv_has_residual(kv.dtype);  // q4, kivi2: open groups read in fp16

  thread_local std::vector<float> acc_buf;
  thread_local std::vector<float> tiles;  // kQuant: K, V quantized views, K, V fp16 views [kAttnTile, hd]
  const size_t tile_elems = static_cast<size_t>(kAttnTile) * hd;
  if (kQuant && tiles.size() < 4 * tile_elems) tiles.resize(4 * tile_elems);
  thread_local std::vector<QueryState> qs;
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
      const int32_t qlim = kivi ? (pos + 1) / kv.block_size * kv.block_size : INT32_MAX;
      qs[ti * t.n_heads + hi_] = QueryState{q + row * hd, out + row * hd, -INFINITY, 0.f, lo, hi, qlim};
    }
  }

  const T* krows[kAttnTile];
  const T* vrows[kAttnTile];
  const T* krows_f[kAttnTile];  // kivi2: fp16 view (as f32) of open-group rows, else nullptr
  const T* vrows_f[kAttnTile];
  const T* ksel[kAttnTile];
  const T* vsel[kAttnTile];
  int32_t min_qlim = INT32_MAX, max_qlim = 0;
  for (int qi = 0; qi < n_q; ++qi) {
    min_qlim = std::min(min_qlim, qs[qi].qlim);
    max_qlim = std::max(max_qlim, qs[qi].qlim);
  }
  alignas(32) float dots[2][kAttnTile];
  const int64_t head_stride = static_cast<int64_t>(kv.block_size) * hd;
  const int64_t block_stride = kv.n_kv_heads * head_stride;

  for (int32_t base = task_lo / kAttnTile * kAttnTile; base < task_hi; base += kAttnTile) {
    const int32_t ta = std::max(task_lo, base), tb = std::min(task_hi, base + kAttnTile);
    if constexpr (!kQuant) {
      for (int32_t j = ta; j < tb; ++j) {
        const int64_t off = s.block_table[j / kv.block_size] * block_stride + kvh * head_stride +
                            static_cast<int64_t>(j % kv.block_size) * hd;
        krows[j - base] = kpool + off;
        vrows[j - base] = vpool + off;
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
            if (j >= qb) {  // no fp16 copy (per-token keys): the quantized view is what everyone reads
              kv_dequant_rows_avx2(kv, s, false, kvh, j, j + 1, kt + static_cast<size_t>(j - base) * hd);
              kv_dequant_rows_avx2(kv, s, true, kvh, j, j + 1, vt + static_cast<size_t>(j - base) * hd);
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
    // token, always) share their K loads in pairs; each query's arithmetic
    // is the same either way.
    for (int qi = 0; qi < n_q;) {
      const int a = std::max(qs[qi].lo, base) - base, b = std::min(qs[qi].hi, base + kAttnTile) - base;
      if (a >= b) {
        ++qi;
        continue;
      }
      const auto clip_qlim = [&](int32_t x) { return std::clamp(x, base, base + kAttnTile); };
      const bool pair = qi + 1 < n_q && std::max(qs[qi + 1].lo, base) - base == a &&
                        std::min(qs[qi + 1].hi, base + kAttnTile) - base == b &&
                        clip_qlim(qs[qi + 1].qlim) == clip_qlim(qs[qi].qlim);
      const T* const* kr = krows;
      const T* const* vr = vrows;
      if (kQuant && kivi) {
        const int32_t ql = qs[qi].qlim;
        for (int j = a; j < b; ++j) {
          const bool f = base + j >= ql && krows_f[j] != nullptr;
          ksel[j] = f ? krows_f[j] : krows[j];
          vsel[j] = f ? vrows_f[j] : vrows[j];
        }
        kr = ksel;
        vr = vsel;
      }
      for (int g = 0; g < kAttnTile; g += 8) {
        if (g + 8 <= a || g >= b) continue;
        const T* rows[8];
        for (int r = 0; r < 8; ++r) rows[r] = (g + r >= a && g + r < b) ? kr[g + r] : zero_row.data();
        if (pair) {
          dot8x2(qs[qi].q, qs[qi + 1].q, rows, hd, dots[0] + g, dots[1] + g);
        } else {
          _mm256_store_ps(dots[0] + g, dot8(qs[qi].q, rows, hd));
        }
      }
      for (int k = 0; k <= int{pair}; ++k) {
        softmax_update(qs[qi + k], dots[k], a, b, p, &acc_buf[static_cast<size_t>(qi + k) * hd], vr, hd);
      }
      qi += 1 + int{pair};
    }
  }

  for (int qi = 0; qi < n_q; ++qi) {
    const float* acc = &acc_buf[static_cast<size_t>(qi) * hd];
    const __m256 inv = _mm256_set1_ps(1.f / qs[qi].l);
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(qs[qi].out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
    // kivi2 values (quantized and fp16 alike) are H v: sum p_j H v_j = H out.
    if (kQuant && kv_rotates_v(kv.dtype)) kv_hadamard(qs[qi].out, hd);
  }
}

}  // namespace

void attention_task_avx2(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                         const AttentionParams& p, const AttnTask& t, float* out) {
  if (kv.dtype == DType::F32) return task_avx2<float, false>(q, kv, s, p, t, out);
  if (kv.dtype == DType::F16) return task_avx2<uint16_t, false>(q, kv, s, p, t, out);
  task_avx2<float, true>(q, kv, s, p, t, out);
}

void load_f16_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
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
