#include "kernels/matmul_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/quant_avx2.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_simd_avx2.h"
#include "kernels/thread_pool.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus::matmul_avx2 {
namespace {

using simd::half_to_float;

#ifndef OMNIBUS_MATMUL_ROWS
#define OMNIBUS_MATMUL_ROWS 2
#endif
constexpr int kRows = OMNIBUS_MATMUL_ROWS;  // weight rows per register tile (R <= kRows)

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Weight policies: how to get a block's 32 quants into one register.
// kSigned: quants are int8 (dot via the sign trick); else uint8 with a min term.
struct WQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kSigned = true;
  static __m256i quants(const Block& b) {
    return _mm256_sub_epi8(simd::nibbles_32(b.qs), _mm256_set1_epi8(8));
  }
};
struct WQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false;
  static __m256i quants(const Block& b) {
    const __m256i hi = _mm256_and_si256(simd::bits_to_bytes(simd::load_u32(b.qh)), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(simd::nibbles_32(b.qs), hi);
  }
};

// y[t * y_stride + r] for r < R, t < T: rows w0 + r * w_row against act[0..nb).
// Per output: acc = fma(d_w * d_a, float(isum lanes), acc) over blocks in order,
// then hsum(acc) (+ the min term accumulated with scalar-equivalent fma).
template <class W, int R, int T>
void kernel(const uint8_t* w0, size_t w_row, const ActBlock32* act, int64_t nb, float* y,
            int64_t y_stride) {
  using Block = typename W::Block;
  const Block* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const Block*>(w0 + r * w_row);
  __m256 acc[R][T];
  __m128 macc[R];
  for (int r = 0; r < R; ++r) {
    macc[r] = _mm_setzero_ps();
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    __m256i q[R];
    __m256 dw[R];
    for (int r = 0; r < R; ++r) {
      q[r] = W::quants(rows[r][b]);
      dw[r] = _mm256_set1_ps(half_to_float(rows[r][b].d));
    }
    __m256i uq[R];
    if constexpr (W::kSigned) {
      for (int r = 0; r < R; ++r) uq[r] = _mm256_sign_epi8(q[r], q[r]);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i av = load256(a.qs[t]);
      const __m256 da = _mm256_broadcast_ss(&a.d[t]);
      for (int r = 0; r < R; ++r) {
        __m256i p;
        if constexpr (W::kSigned) {
          p = simd::dot_u8s8(uq[r], _mm256_sign_epi8(av, q[r]));
        } else {
          p = simd::dot_u8s8(q[r], av);
        }
        acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], da), _mm256_cvtepi32_ps(p), acc[r][t]);
      }
    }
    if constexpr (!W::kSigned) {
      const __m128 s = _mm_loadu_ps(a.s);
      for (int r = 0; r < R; ++r) {
        macc[r] = _mm_fmadd_ps(_mm_set1_ps(half_to_float(rows[r][b].m)), s, macc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(16) float m[4];
    _mm_store_ps(m, macc[r]);
    for (int t = 0; t < T; ++t) {
      float v = simd::hsum(acc[r][t]);
      if constexpr (!W::kSigned) v += m[t];
      y[t * y_stride + r] = v;
    }
  }
}

using KernelFn = void (*)(const uint8_t*, size_t, const ActBlock32*, int64_t, float*, int64_t);

template <class W, int R>
KernelFn pick_t(int t) {
  switch (t) {
    case 1: return kernel<W, R, 1>;
    case 2: return kernel<W, R, 2>;
    case 3: return kernel<W, R, 3>;
    default: return kernel<W, R, 4>;
  }
}

template <class W>
KernelFn pick(int r, int t) {
  static_assert(kRows <= 4 && kTok == 4);
  switch (r) {
    case 1: return pick_t<W, 1>(t);
    case 2: return pick_t<W, std::min(2, kRows)>(t);
    case 3: return pick_t<W, std::min(3, kRows)>(t);
    default: return pick_t<W, kRows>(t);
  }
}

template <class W>
void run(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
         MatmulScratch& scratch) {
  OMNIBUS_CHECK(w.n_in % kQK == 0);
  const int64_t nb = w.n_in / kQK;
  const int64_t n_tiles = (n_tok + kTok - 1) / kTok;
  const size_t bytes = size_t(n_tiles * nb) * sizeof(ActBlock32);
  if (scratch.quantized_x.size() < bytes) scratch.quantized_x.resize(bytes);
  auto* act = reinterpret_cast<ActBlock32*>(scratch.quantized_x.data());
  pool.parallel_for(n_tiles, [&](int64_t tile, int) {
    const int64_t n_valid = std::min<int64_t>(kTok, n_tok - tile * kTok);
    quantize_tile(x + tile * kTok * w.n_in, w.n_in, n_valid, !W::kSigned, act + tile * nb);
  });

  const size_t w_row = sizeof(typename W::Block) * size_t(nb);
  // Rows per task: a multiple of kRows, a few tasks per thread.
  const int64_t tasks_wanted = int64_t(pool.n_threads()) * 4;
  int64_t rows = std::max<int64_t>(8, (w.n_out + tasks_wanted - 1) / tasks_wanted);
  rows = (rows + kRows - 1) / kRows * kRows;
  const int64_t n_tasks = (w.n_out + rows - 1) / rows;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(n_tasks, [&](int64_t task, int) {
    const int64_t r0 = task * rows, r1 = std::min(w.n_out, r0 + rows);
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
      const ActBlock32* a = act + tile * nb;
      float* yt = y + tile * kTok * w.n_out;
      for (int64_t r = r0; r < r1; r += kRows) {
        const int R = int(std::min<int64_t>(kRows, r1 - r));
        pick<W>(R, T)(wdata + r * w_row, w_row, a, nb, yt + r, w.n_out);
      }
    }
  });
}


// ------------------------------------------------------------- K-quants


// A weight super-block unpacked for the kernel: 8 chunks of 32 unsigned quants
// and, per chunk, the int16 scale of each of its 16 madd pairs.
struct UnpackedK {
  __m256i q[8];
  __m256i scale[8];
  float d, dmin;
  __m128i mins16;   // the 8 mins as int16
};

struct WQ5_K {
  using Block = BlockQ5_K;
  static void unpack(const Block& b, UnpackedK* u) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, b.scales, &sc[j], &m[j]);
    u->mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i qh = load256(b.qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(b.qs + 32 * c);
      const __m256i h_lo = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
      const __m256i h_hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
      u->q[2 * c] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h_lo, 4));
      u->q[2 * c + 1] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_slli_epi16(h_hi, 4));
    }
    for (int j = 0; j < 8; ++j) u->scale[j] = _mm256_set1_epi16(sc[j]);
    u->d = half_to_float(b.d);
    u->dmin = half_to_float(b.dmin);
  }
};

// Same arithmetic per output as quant_avx2::vec_dot_q5_K: per super-block
// an exact int32 sum (8 lanes), then acc = fma(d_w * d_a, float(isum), acc);
// the min term in a scalar fma chain; result hsum(acc) - mins.
template <class W, int R, int T>
void kernel_k(const uint8_t* w0, size_t w_row, const ActBlockK* act, int64_t nsb, float* y,
              int64_t y_stride) {
  using Block = typename W::Block;
  __m256 acc[R][T];
  float mins[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      acc[r][t] = _mm256_setzero_ps();
      mins[r][t] = 0.0f;
    }
  }
  UnpackedK u[R];
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    for (int r = 0; r < R; ++r) W::unpack(reinterpret_cast<const Block*>(w0 + r * w_row)[sb], &u[r]);
    for (int t = 0; t < T; ++t) {
      __m256i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i av = load256(a.qs[t] + 32 * c);
        for (int r = 0; r < R; ++r) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r].q[c], av), u[r].scale[c]);
          isum[r] = _mm256_add_epi32(isum[r], p);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m128i pairs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsum_pairs[t]));
        const int32_t msum = simd::hsum_i32_128(_mm_madd_epi16(u[r].mins16, pairs));
        mins[r][t] = std::fma(u[r].dmin * a.d[t], float(msum), mins[r][t]);
        acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(u[r].d * a.d[t]), _mm256_cvtepi32_ps(isum[r]), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      y[t * y_stride + r] = simd::hsum(acc[r][t]) - mins[r][t];
    }
  }
}

using KernelKFn = void (*)(const uint8_t*, size_t, const ActBlockK*, int64_t, float*, int64_t);

template <class W, int R>
KernelKFn pick_k_t(int t) {
  switch (t) {
    case 1: return kernel_k<W, R, 1>;
    case 2: return kernel_k<W, R, 2>;
    case 3: return kernel_k<W, R, 3>;
    default: return kernel_k<W, R, 4>;
  }
}

constexpr int kRowsK = 2;

template <class W>
KernelKFn pick_k(int r, int t) {
  return r == 1 ? pick_k_t<W, 1>(t) : pick_k_t<W, kRowsK>(t);
}

template <class W>
void run_k(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
           MatmulScratch& scratch) {
  OMNIBUS_CHECK(w.n_in % kQKK == 0);
  const int64_t nsb = w.n_in / kQKK;
  const int64_t n_tiles = (n_tok + kTok - 1) / kTok;
  const size_t bytes = size_t(n_tiles * nsb) * sizeof(ActBlockK);
  if (scratch.quantized_x.size() < bytes) scratch.quantized_x.resize(bytes);
  auto* act = reinterpret_cast<ActBlockK*>(scratch.quantized_x.data());
  pool.parallel_for(n_tiles, [&](int64_t tile, int) {
    const int64_t n_valid = std::min<int64_t>(kTok, n_tok - tile * kTok);
    quantize_tile_k(x + tile * kTok * w.n_in, w.n_in, n_valid, act + tile * nsb);
  });
  const size_t w_row = sizeof(typename W::Block) * size_t(nsb);
  const int64_t tasks_wanted = int64_t(pool.n_threads()) * 4;
  int64_t rows = std::max<int64_t>(8, (w.n_out + tasks_wanted - 1) / tasks_wanted);
  rows = (rows + kRowsK - 1) / kRowsK * kRowsK;
  const int64_t n_tasks = (w.n_out + rows - 1) / rows;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(n_tasks, [&](int64_t task, int) {
    const int64_t r0 = task * rows, r1 = std::min(w.n_out, r0 + rows);
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
      float* yt = y + tile * kTok * w.n_out;
      for (int64_t r = r0; r < r1; r += kRowsK) {
        const int R = int(std::min<int64_t>(kRowsK, r1 - r));
        pick_k<W>(R, T)(wdata + r * w_row, w_row, act + tile * nsb, nsb, yt + r, w.n_out);
      }
    }
  });
}

}  // namespace

void quantize_tile_k(const float* x, int64_t n_in, int64_t n_valid, ActBlockK* act) {
  const int64_t nsb = n_in / kQKK;
  std::memset(act, 0, size_t(nsb) * sizeof(ActBlockK));
  for (int64_t lane = 0; lane < n_valid; ++lane) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ8_K q;
      quant_avx2::from_float_q8_K(x + lane * n_in + sb * kQKK, &q, kQKK);
      std::memcpy(act[sb].qs[lane], q.qs, kQKK);
      act[sb].d[lane] = q.d;
      std::memcpy(act[sb].bsums[lane], q.bsums, sizeof(q.bsums));
      for (int j = 0; j < 8; ++j) act[sb].bsum_pairs[lane][j] = int16_t(q.bsums[2 * j] + q.bsums[2 * j + 1]);
    }
  }
}

void quantize_tile(const float* x, int64_t n_in, int64_t n_valid, bool with_sum, ActBlock32* act,
                   int32_t* qsum) {
  const int64_t nb = n_in / kQK;
  std::memset(act, 0, size_t(nb) * sizeof(ActBlock32));
  if (qsum != nullptr) std::memset(qsum, 0, size_t(nb) * kTok * sizeof(int32_t));
  for (int64_t lane = 0; lane < n_valid; ++lane) {
    const float* xr = x + lane * n_in;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = simd::abs_max_32(xr + b * kQK) / 127;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      __m256i sum;
      const __m256i q = simd::quantize_32(xr + b * kQK, id, &sum);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(act[b].qs[lane]), q);
      // fp16 round trips with F16C (round to nearest even, as fp32_to_fp16)
      act[b].d[lane] = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
      if (with_sum || qsum != nullptr) {
        const int32_t total = simd::hsum_i32(sum);
        if (qsum != nullptr) qsum[b * kTok + lane] = total;
        if (with_sum) act[b].s[lane] = _cvtsh_ss(_cvtss_sh(float(total) * d, _MM_FROUND_TO_NEAREST_INT));
      }
    }
  }
}

bool has_tiled_kernel(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q5_1:
    case DType::Q5_K:
      return true;
    default:
      return false;
  }
}

void matmul_tiled(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                  MatmulScratch& scratch) {
  switch (w.type) {
    case DType::Q4_0: return run<WQ4_0>(w, x, n_tok, y, pool, scratch);
    case DType::Q5_1: return run<WQ5_1>(w, x, n_tok, y, pool, scratch);
    case DType::Q5_K: return run_k<WQ5_K>(w, x, n_tok, y, pool, scratch);
    default: OMNIBUS_CHECK(false && "no tiled kernel for this type");
  }
}

}  // namespace omnibus::matmul_avx2
