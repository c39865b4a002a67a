// AVX2 + FMA versions of the ops.h kernels (see ops_internal.h). Tails shorter
// than 8 go through the same vector code with masked loads and stores, so
// every element is computed the same way wherever it sits in the row.
#include <immintrin.h>

#include <algorithm>

#include "kernels/ops_internal.h"
#include "kernels/ops_vec_avx2.h"

namespace omnibus {
namespace {

using avx2::tail_mask;

// Applies f elementwise: out[i] = f(a[i], b[i]).
template <typename F>
inline void map2(const float* a, const float* b, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  if (i < n) {
    const __m256i m = tail_mask(static_cast<int>(n - i));
    _mm256_maskstore_ps(out + i, m, f(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}

template <typename F>
inline void map1(const float* a, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i)));
  if (i < n) {
    const __m256i m = tail_mask(static_cast<int>(n - i));
    _mm256_maskstore_ps(out + i, m, f(_mm256_maskload_ps(a + i, m)));
  }
}

// Adds v^2 of 8 floats to two double accumulators.
inline void sumsq_pd(__m256 v, __m256d& acc0, __m256d& acc1) {
  const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  acc0 = _mm256_fmadd_pd(lo, lo, acc0);
  acc1 = _mm256_fmadd_pd(hi, hi, acc1);
}

inline void sum_pd(__m256 v, __m256d& acc0, __m256d& acc1) {
  acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

}  // namespace

void rms_norm_avx2(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  OMNIBUS_CHECK(n > 0 && n_rows >= 0);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) sumsq_pd(_mm256_loadu_ps(xr + i), acc0, acc1);
    if (i < n) sumsq_pd(_mm256_maskload_ps(xr + i, tail_mask(static_cast<int>(n - i))), acc0, acc1);
    const double sum = avx2::hsum_pd(_mm256_add_pd(acc0, acc1));
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(mean + eps));
    if (w) {
      map2(xr, w, yr, n,
           [&](__m256 a, __m256 b) { return _mm256_mul_ps(_mm256_mul_ps(a, scale), b); });
    } else {
      map1(xr, yr, n, [&](__m256 a) { return _mm256_mul_ps(a, scale); });
    }
  }
}

void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  map2(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(avx2::silu_ps(g), u); });
}

void geglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
  map2(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(avx2::gelu_ps(g), u); });
}

void silu_avx2(const float* x, float* y, int64_t n) { map1(x, y, n, avx2::silu_ps); }

void gelu_avx2(const float* x, float* y, int64_t n) { map1(x, y, n, avx2::gelu_ps); }

void softmax_avx2(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256 kNegInf = _mm256_set1_ps(-__builtin_inff());
  __m256 vmax = kNegInf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i m = tail_mask(static_cast<int>(n - i));
    const __m256 v =
        _mm256_blendv_ps(kNegInf, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m));
    vmax = _mm256_max_ps(vmax, v);
  }
  const __m256 max = _mm256_set1_ps(avx2::hmax_ps(vmax));
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = avx2::exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), max));
    _mm256_storeu_ps(x + i, e);
    sum_pd(e, acc0, acc1);
  }
  if (i < n) {
    const __m256i m = tail_mask(static_cast<int>(n - i));
    __m256 e = avx2::exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), max));
    e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    sum_pd(e, acc0, acc1);
  }
  const float inv = static_cast<float>(1.0 / avx2::hsum_pd(_mm256_add_pd(acc0, acc1)));
  scale_inplace_avx2(x, inv, n);
}

int64_t argmax_avx2(const float* x, int64_t n) {
  const __m256 kNegInf = _mm256_set1_ps(-__builtin_inff());
  // max_ps(v, m) returns m when v is NaN: NaN never becomes the max.
  __m256 m0 = kNegInf, m1 = kNegInf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  float best = avx2::hmax_ps(_mm256_max_ps(m0, m1));
  for (; i < n; ++i) {
    if (x[i] > best) best = x[i];
  }
  if (!(best > -__builtin_inff())) return 0;  // nothing beats -inf
  // the first index holding the max
  const __m256 vb = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vb, _CMP_EQ_OQ));
    if (mask != 0) return i + __builtin_ctz(unsigned(mask));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // unreachable: best is one of x
}

float log_sum_exp_avx2(const float* x, int64_t n, float max) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    sum_pd(avx2::exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax)), acc0, acc1);
  if (i < n) {
    const __m256i m = tail_mask(static_cast<int>(n - i));
    const __m256 e = avx2::exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), vmax));
    sum_pd(_mm256_and_ps(e, _mm256_castsi256_ps(m)), acc0, acc1);
  }
  // The max's own term is exp(0) = 1, so the sum is >= 1 and the result >= max
  // (every logprob <= 0); the clamp keeps that whatever exp_ps rounds to.
  const double sum = std::max(1.0, avx2::hsum_pd(_mm256_add_pd(acc0, acc1)));
  return max + static_cast<float>(std::log(sum));
}

void add_inplace_avx2(float* y, const float* x, int64_t n) {
  map2(y, x, y, n, [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); });
}

void scale_inplace_avx2(float* y, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  map1(y, y, n, [&](__m256 a) { return _mm256_mul_ps(a, vs); });
}

}  // namespace omnibus
