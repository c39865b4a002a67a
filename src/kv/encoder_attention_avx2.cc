// AVX2 kernel of encoder attention (contract: encoder_attention.h).
//
// A task (query rows of one sequence and head) copies its head's keys once,
// transposed to [head_dim][n rounded up to 16] f32, so a score tile is 16
// keys x 4 queries of register accumulators: per element d, two key vectors,
// four broadcast query values and eight FMAs (no horizontal sums). Scores of
// 4 queries against all keys are kept whole (an encoder's prompt is at most
// its context), then an exact two-pass softmax, then P.V with 16 output
// channels x 4 queries in registers per pass over the value rows. Each lane
// is one (query, key) or (query, channel) FMA chain in a fixed order, so a
// query's bits do not depend on which queries share its group.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops_vec_avx2.h"
#include "kv/encoder_attention.h"
#include "util/check.h"

namespace omnibus {
namespace {

constexpr int kGroup = 4;  // queries sharing each key / value load
constexpr int kKeys = 16;  // keys per score tile (two vectors)

// s[g * np + j] = scale * (q_g . k_j), j < np (kt: [hd][np], zero past n).
template <int G>
void scores(const float* const* qr, const float* kt, int64_t np, int hd, float scale, float* s) {
  const __m256 vs = _mm256_set1_ps(scale);
  for (int64_t j = 0; j < np; j += kKeys) {
    __m256 a[G][2];
    for (int g = 0; g < G; ++g) a[g][0] = a[g][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + d * np + j);
      const __m256 k1 = _mm256_loadu_ps(kt + d * np + j + 8);
      for (int g = 0; g < G; ++g) {
        const __m256 b = _mm256_broadcast_ss(qr[g] + d);
        a[g][0] = _mm256_fmadd_ps(b, k0, a[g][0]);
        a[g][1] = _mm256_fmadd_ps(b, k1, a[g][1]);
      }
    }
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(s + g * np + j, _mm256_mul_ps(a[g][0], vs));
      _mm256_storeu_ps(s + g * np + j + 8, _mm256_mul_ps(a[g][1], vs));
    }
  }
}

// Row s[0..np) of scores (n valid) -> probabilities (0 past n); returns
// 1 / their sum.
float softmax_row(float* s, int32_t n, int64_t np) {
  for (int64_t j = n; j < np; ++j) s[j] = -INFINITY;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < np; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  const __m256 m = _mm256_set1_ps(avx2::hmax_ps(vmax));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < np; j += 8) {
    const __m256 e = avx2::exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), m));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  return 1.f / avx2::hsum_ps(sum);
}

// o_g[0..hd) = inv_g * sum_{j < n} p_g[j] v_j, W vectors of channels per
// pass over the value rows (v: the first row's head, rows kv_stride apart).
template <int G, int W>
void pv_channels(const float* const* pr, const float* v, int64_t kv_stride, int32_t n, int d,
                 const float* inv, float* const* o) {
  __m256 a[G][W];
  for (int g = 0; g < G; ++g) {
    for (int w = 0; w < W; ++w) a[g][w] = _mm256_setzero_ps();
  }
  for (int32_t j = 0; j < n; ++j) {
    const float* vj = v + j * kv_stride + d;
    __m256 vv[W];
    for (int w = 0; w < W; ++w) vv[w] = _mm256_loadu_ps(vj + 8 * w);
    for (int g = 0; g < G; ++g) {
      const __m256 b = _mm256_broadcast_ss(pr[g] + j);
      for (int w = 0; w < W; ++w) a[g][w] = _mm256_fmadd_ps(b, vv[w], a[g][w]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m256 vi = _mm256_set1_ps(inv[g]);
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(o[g] + d + 8 * w, _mm256_mul_ps(a[g][w], vi));
  }
}

template <int G>
void group(const float* const* qr, const float* kt, int64_t np, const float* v, int64_t kv_stride,
           int32_t n, const AttentionParams& p, float* s, float* const* o) {
  const int hd = p.head_dim;
  scores<G>(qr, kt, np, hd, p.scale, s);
  float inv[G];
  const float* pr[G];
  for (int g = 0; g < G; ++g) {
    inv[g] = softmax_row(s + g * np, n, np);
    pr[g] = s + g * np;
  }
  int d = 0;
  for (; d + 16 <= hd; d += 16) pv_channels<G, 2>(pr, v, kv_stride, n, d, inv, o);
  for (; d < hd; d += 8) pv_channels<G, 1>(pr, v, kv_stride, n, d, inv, o);
}

}  // namespace

void encoder_attention_task_avx2(const float* q, const float* k, const float* v,
                                 const AttentionParams& p, const EncoderTask& t, float* out) {
  const int hd = p.head_dim;
  OMNIBUS_DCHECK(hd % 8 == 0);
  const int64_t q_stride = int64_t(p.n_head) * hd, kv_stride = int64_t(p.n_kv_head) * hd;
  const int kvh = t.head / (p.n_head / p.n_kv_head);
  const int32_t n = t.s.n;
  const int64_t np = (int64_t(n) + kKeys - 1) / kKeys * kKeys;
  thread_local std::vector<float> kt, s;
  kt.resize(size_t(hd * np));
  s.resize(size_t(kGroup * np));
  const float* k0 = k + t.s.first * kv_stride + kvh * hd;
  for (int32_t j = 0; j < n; ++j) {
    for (int d = 0; d < hd; ++d) kt[size_t(d * np + j)] = k0[j * kv_stride + d];
  }
  for (int d = 0; d < hd; ++d) std::fill_n(kt.data() + d * np + n, np - n, 0.f);
  const float* v0 = v + t.s.first * kv_stride + kvh * hd;
  for (int32_t i = t.t0; i < t.t0 + t.nt; i += kGroup) {
    const int G = std::min<int32_t>(kGroup, t.t0 + t.nt - i);
    const float* qr[kGroup];
    float* o[kGroup];
    for (int g = 0; g < G; ++g) {
      qr[g] = q + (t.s.first + i + g) * q_stride + t.head * hd;
      o[g] = out + (t.s.first + i + g) * q_stride + t.head * hd;
    }
    switch (G) {
      case 4:
        group<4>(qr, kt.data(), np, v0, kv_stride, n, p, s.data(), o);
        break;
      case 3:
        group<3>(qr, kt.data(), np, v0, kv_stride, n, p, s.data(), o);
        break;
      case 2:
        group<2>(qr, kt.data(), np, v0, kv_stride, n, p, s.data(), o);
        break;
      default:
        group<1>(qr, kt.data(), np, v0, kv_stride, n, p, s.data(), o);
    }
  }
}

}  // namespace omnibus
