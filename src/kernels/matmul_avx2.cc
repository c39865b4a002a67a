#include "kernels/matmul_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/quant_blocks.h"
#include "kernels/quant_simd_avx2.h"
#include "kernels/thread_pool.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus::matmul_avx2 {
namespace {

using simd::half_to_float;

constexpr int kTok = 4;   // tokens per activation tile (T <= kTok)
constexpr int kRows = 2;  // weight rows per register tile (R <= kRows)

// Activations of kTok tokens for one 32-element block, quantized like
// Q8_0 / Q8_1 (d and s already converted from their fp16 values to f32, so the
// numbers are those of the reference). Lanes past n_tok are zero.
struct ActBlock32 {
  int8_t qs[kTok][kQK];
  float d[kTok];
  float s[kTok];  // fp16(d * sum(qs)) as f32 (Q8_1); unused for Q8_0 pairings
};
static_assert(sizeof(ActBlock32) == 160);

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
struct WQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = true;
  static __m256i quants(const Block& b) {
    const __m256i hi = _mm256_andnot_si256(simd::bits_to_bytes(simd::load_u32(b.qh)),
                                           _mm256_set1_epi8(int8_t(0xF0)));
    return _mm256_or_si256(simd::nibbles_32(b.qs), hi);
  }
};
struct WQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i quants(const Block& b) { return load256(b.qs); }
};
struct WQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false;
  static __m256i quants(const Block& b) { return simd::nibbles_32(b.qs); }
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
  static_assert(kRows <= 2 && kTok == 4);
  return r == 1 ? pick_t<W, 1>(t) : pick_t<W, 2>(t);
}

// Quantizes tokens [4 * tile, 4 * tile + 4) of x into act[0..nb).
void quantize_tile(const float* x, int64_t n_in, int64_t n_valid, bool with_sum, ActBlock32* act) {
  const int64_t nb = n_in / kQK;
  std::memset(act, 0, size_t(nb) * sizeof(ActBlock32));
  for (int64_t lane = 0; lane < n_valid; ++lane) {
    const float* xr = x + lane * n_in;
    for (int64_t b = 0; b < nb; ++b) {
      const float d = simd::abs_max_32(xr + b * kQK) / 127;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      __m256i sum;
      const __m256i q = simd::quantize_32(xr + b * kQK, id, &sum);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(act[b].qs[lane]), q);
      act[b].d[lane] = fp16_to_fp32(fp32_to_fp16(d));
      if (with_sum) act[b].s[lane] = fp16_to_fp32(fp32_to_fp16(float(simd::hsum_i32(sum)) * d));
    }
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

}  // namespace

bool has_tiled_kernel(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
      return true;
    default:
      return false;
  }
}

void matmul_tiled(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                  MatmulScratch& scratch) {
  switch (w.type) {
    case DType::Q4_0: return run<WQ4_0>(w, x, n_tok, y, pool, scratch);
    case DType::Q4_1: return run<WQ4_1>(w, x, n_tok, y, pool, scratch);
    case DType::Q5_0: return run<WQ5_0>(w, x, n_tok, y, pool, scratch);
    case DType::Q5_1: return run<WQ5_1>(w, x, n_tok, y, pool, scratch);
    case DType::Q8_0: return run<WQ8_0>(w, x, n_tok, y, pool, scratch);
    default: OMNIBUS_CHECK(false && "no tiled kernel for this type");
  }
}

}  // namespace omnibus::matmul_avx2
