#include "kernels/matmul_float_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/float_dot_avx2.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus::matmul_float {
namespace {

using float_dot::F32;

constexpr int kMaxTok = 4;  // tokens per register tile

// y[t * y_stride + r] for r < R, t < T: rows w0 + r * w_row against the
// activation rows x + t * n (f32). Per output: float_dot::dot's arithmetic.
template <class W, int R, int T>
void tile(const uint8_t* w0, size_t w_row, const float* x, int64_t n, float* y, int64_t y_stride) {
  const int64_t n8 = n - n % 8;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < n8; k += 8) {
    if constexpr (T == 1) {
      const __m256 xv = _mm256_loadu_ps(x + k);
      for (int r = 0; r < R; ++r) acc[r][0] = _mm256_fmadd_ps(W::load8(w0 + r * w_row, k), xv, acc[r][0]);
    } else {
      __m256 wv[R];
      for (int r = 0; r < R; ++r) wv[r] = W::load8(w0 + r * w_row, k);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(x + t * n + k);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = simd::hsum(acc[r][t]);
      for (int64_t k = n8; k < n; ++k) s = std::fma(W::load1(w0 + r * w_row, k), x[t * n + k], s);
      y[t * y_stride + r] = s;
    }
  }
}

using TileFn = void (*)(const uint8_t*, size_t, const float*, int64_t, float*, int64_t);

// Rows per tile: 8 for single tokens (8 independent chains hide the FMA
// latency), 3 for 2-4 tokens (12 accumulators, 3 rows and one token vector:
// the 16 registers; 4 rows spill and run at 60%).
constexpr int kRowsOne = 8, kRowsMany = 3;

template <class W, int R>
TileFn pick_t(int t) {
  switch (t) {
    case 1: return tile<W, R, 1>;
    case 2: return tile<W, R, 2>;
    case 3: return tile<W, R, 3>;
    default: return tile<W, R, 4>;
  }
}

template <class W>
TileFn pick(int r, int t) {
  if (t == 1) {
    switch (r) {
      case 1: return tile<W, 1, 1>;
      case 2: return tile<W, 2, 1>;
      case 3: return tile<W, 3, 1>;
      case 4: return tile<W, 4, 1>;
      case 5: return tile<W, 5, 1>;
      case 6: return tile<W, 6, 1>;
      case 7: return tile<W, 7, 1>;
      default: return tile<W, kRowsOne, 1>;
    }
  }
  static_assert(kRowsMany == 3);
  switch (r) {
    case 1: return pick_t<W, 1>(t);
    case 2: return pick_t<W, 2>(t);
    default: return pick_t<W, 3>(t);
  }
}

// x rounded through the 16-bit format: dst[i] = f32(fmt(x[i])), round to nearest even.
void round_f16(const float* x, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}
void round_bf16(const float* x, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      u = (u | 0x00400000u) & 0xffff0000u;  // quiet NaN, as fp32_to_bf16
    } else {
      u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    }
    std::memcpy(dst + i, &u, 4);
  }
}

template <class W>
void run(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool, MatmulScratch& scratch) {
  const int64_t n = w.n_in;
  const float* xa = x;  // activations as the vec_dot type's values, f32
  if (w.type != DType::F32) {
    const size_t bytes = size_t(n_tok * n) * sizeof(float);
    if (scratch.quantized_x.size() < bytes) scratch.quantized_x.resize(bytes);
    auto* dst = reinterpret_cast<float*>(scratch.quantized_x.data());
    pool.parallel_for(n_tok, [&](int64_t t, int) {
      if (w.type == DType::F16) round_f16(x + t * n, dst + t * n, n);
      else round_bf16(x + t * n, dst + t * n, n);
    });
    xa = dst;
  }
  const size_t w_row = dtype_row_size(w.type, n);
  // Rows per task: a multiple of kChunkRows, a few tasks per thread; a task
  // runs its rows kChunkRows at a time (a multiple of both tile heights)
  // against every token tile, so the chunk's rows stay in L1/L2.
  constexpr int64_t kChunkRows = 24;
  const int64_t tasks_wanted = int64_t(pool.n_threads()) * 4;
  const int64_t rows = ((w.n_out + tasks_wanted - 1) / tasks_wanted + kChunkRows - 1) / kChunkRows * kChunkRows;
  const int64_t n_tasks = (w.n_out + rows - 1) / rows;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(n_tasks, [&](int64_t task, int) {
    const int64_t r0 = task * rows, r1 = std::min(w.n_out, r0 + rows);
    for (int64_t c0 = r0; c0 < r1; c0 += kChunkRows) {
      const int64_t c1 = std::min(r1, c0 + kChunkRows);
      for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxTok) {
        const int T = int(std::min<int64_t>(kMaxTok, n_tok - t0));
        const int R_max = T == 1 ? kRowsOne : kRowsMany;
        for (int64_t r = c0; r < c1; r += R_max) {
          const int R = int(std::min<int64_t>(R_max, c1 - r));
          pick<W>(R, T)(wdata + size_t(r) * w_row, w_row, xa + t0 * n, n, y + t0 * w.n_out + r, w.n_out);
        }
      }
    }
  });
}

}  // namespace

bool has_float_kernel(DType type) { return type == DType::F32 || type == DType::F16 || type == DType::BF16; }

void matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  OMNIBUS_CHECK(n_tok >= 1);
  switch (w.type) {
    case DType::F32: return run<F32>(w, x, n_tok, y, pool, scratch);
    case DType::F16: return run<float_dot::F16>(w, x, n_tok, y, pool, scratch);
    case DType::BF16: return run<float_dot::BF16>(w, x, n_tok, y, pool, scratch);
    default: OMNIBUS_CHECK(false && "no float kernel for this type");
  }
}

}  // namespace omnibus::matmul_float
