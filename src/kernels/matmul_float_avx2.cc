// Register tiles for F32 / F16 / BF16 weights, row-major or packed
// (contract and layout: matmul_float_avx2.h).
#include "kernels/matmul_float_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/cpu_features.h"
#include "kernels/float_dot_avx2.h"
#include "kernels/matmul_float_avx512.h"
#include "kernels/thread_pool.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus::matmul_float {

size_t group_bytes(DType type, int64_t n_in);  // kKernels.group_bytes, defined below
namespace {

using float_dot::F32;

constexpr int kMaxTok = 4;  // tokens per register tile

// Where the weights are. Element k of row r (relative to the tile's first
// row):
//   RowMajor: the GGUF layout, rows w_row bytes apart;
//   Grouped:  pack_groups' 8-row groups ([n8 / 8][8 rows][8 elements], then
//             the tail [8 rows][n - n8]); the tile's rows start at row r0 of
//             the group (r0 + R <= 8).
template <class W>
struct RowMajor {
  const uint8_t* w0;
  size_t w_row;
  int64_t n;
  __m256 load8(int r, int64_t k) const { return W::load8(w0 + size_t(r) * w_row, k); }
  float load1(int r, int64_t k) const { return W::load1(w0 + size_t(r) * w_row, k); }
};
template <class W>
struct Grouped {
  const uint8_t* group;
  int r0;
  int64_t n;
  __m256 load8(int r, int64_t k) const { return W::load8(group, (k + r0 + r) * 8); }  // k % 8 == 0
  float load1(int r, int64_t k) const {
    const int64_t n8 = n - n % 8;
    return W::load1(group, n8 * 8 + (r0 + r) * (n - n8) + (k - n8));
  }
};

// y[t * y_stride + r] for r < R, t < T: R rows (from L) against the
// activation rows x + t * n (f32). Per output: float_dot::dot's arithmetic.
template <int R, int T, class L>
void tile(const L& w, const float* x, int64_t n, float* y, int64_t y_stride) {
  const int64_t n8 = n - n % 8;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < n8; k += 8) {
    if constexpr (T == 1) {
      const __m256 xv = _mm256_loadu_ps(x + k);
      for (int r = 0; r < R; ++r) acc[r][0] = _mm256_fmadd_ps(w.load8(r, k), xv, acc[r][0]);
    } else {
      __m256 wv[R];
      for (int r = 0; r < R; ++r) wv[r] = w.load8(r, k);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(x + t * n + k);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = simd::hsum(acc[r][t]);
      for (int64_t k = n8; k < n; ++k) s = std::fma(w.load1(r, k), x[t * n + k], s);
      y[t * y_stride + r] = s;
    }
  }
}

// Rows per tile: 8 for single tokens (8 independent chains hide the FMA
// latency), 3 for 2-4 tokens (12 accumulators, 3 rows and one token vector:
// the 16 registers; 4 rows spill and run at 60%).
constexpr int kRowsOne = 8, kRowsMany = 3;

// tile<1..sizeof(Rm1), T> by rows - 1.
template <class L, int T, int... Rm1>
constexpr auto row_tiles(std::integer_sequence<int, Rm1...>) {
  return std::array{&tile<Rm1 + 1, T, L>...};
}

// tile<R, T> for runtime 1 <= R <= (T == 1 ? kRowsOne : kRowsMany), 1 <= T <= kMaxTok.
template <class L>
void run_tile(int R, int T, const L& w, const float* x, int64_t n, float* y, int64_t y_stride) {
  static_assert(kRowsOne == 8 && kRowsMany == 3 && kMaxTok == 4);
  static constexpr auto kOne = row_tiles<L, 1>(std::make_integer_sequence<int, kRowsOne>());
  constexpr auto kRows = std::make_integer_sequence<int, kRowsMany>();
  static constexpr std::array kMany = {row_tiles<L, 2>(kRows), row_tiles<L, 3>(kRows),
                                       row_tiles<L, 4>(kRows)};
  if (T == 1) return kOne[size_t(R - 1)](w, x, n, y, y_stride);
  return kMany[size_t(T - 2)][size_t(R - 1)](w, x, n, y, y_stride);
}

// x rounded through the 16-bit format: dst[i] = f32(fmt(x[i])), round to
// nearest even (bf16: as fp32_to_bf16, NaN kept quiet).
void round_f16(const float* x, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                              _MM_FROUND_TO_NEAREST_INT)));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}
void round_bf16(const float* x, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), float_dot::bf16_round_bits(u));
  }
  for (; i < n; ++i) dst[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
}

template <class W>
void run(const WeightView& w, const uint8_t* packed, const float* x, int64_t n_tok, float* y,
         ThreadPool& pool, MatmulScratch& scratch) {
  const int64_t n = w.n_in;
  const float* xa = x;  // activations as the vec_dot type's values, f32
  if (w.type != DType::F32) {
    const size_t bytes = size_t(n_tok * n) * sizeof(float);
    if (scratch.quantized_x.size() < bytes) scratch.quantized_x.resize(bytes);
    auto* dst = reinterpret_cast<float*>(scratch.quantized_x.data());
    pool.parallel_for(n_tok, [&](int64_t t, int) {
      if (w.type == DType::F16)
        round_f16(x + t * n, dst + t * n, n);
      else
        round_bf16(x + t * n, dst + t * n, n);
    });
    xa = dst;
  }
  const size_t w_row = dtype_row_size(w.type, n);
  const size_t gb = group_bytes(w.type, n);
  // Rows per task: a multiple of kChunkRows, a few tasks per thread; a task
  // runs its rows kChunkRows at a time (whole groups, a multiple of both tile
  // heights) against every token tile, so the chunk's rows stay in L1/L2.
  constexpr int64_t kChunkRows = 24;
  // Several tokens on packed groups at the avx512 tier: its row-pair tiles of
  // 6 tokens (matmul_float_avx512.h), whole groups at a time.
  const bool zmm_tiles = packed != nullptr && n_tok >= 2 && isa() >= Isa::kAvx512;
  const int64_t tile_tok = zmm_tiles ? avx512::kTokensPerTile : kMaxTok;
  // Tokens per chunk: about 128 KB of activations (64 at n_in 576, 20 at 1536).
  const int64_t kChunkTok = std::clamp<int64_t>(
      (int64_t(128) << 10) / (n * 4) / tile_tok * tile_tok, tile_tok, 64 / tile_tok * tile_tok);
  const int64_t tasks_wanted = int64_t(pool.n_threads()) * 4;
  const int64_t rows =
      ((w.n_out + tasks_wanted - 1) / tasks_wanted + kChunkRows - 1) / kChunkRows * kChunkRows;
  const int64_t n_tasks = (w.n_out + rows - 1) / rows;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(n_tasks, [&](int64_t task, int) {
    const int64_t r0 = task * rows, r1 = std::min(w.n_out, r0 + rows);
    // Tokens kChunkTok at a time, so a prompt's activations (2.3 KB per token
    // at n_in 576) stay in L2 while the task's rows are walked.
    for (int64_t k0 = 0; k0 < n_tok; k0 += kChunkTok) {
      const int64_t k1 = std::min(n_tok, k0 + kChunkTok);
      for (int64_t c0 = r0; c0 < r1; c0 += kChunkRows) {
        const int64_t c1 = std::min(r1, c0 + kChunkRows);
        if (k1 - k0 > kMaxTok && c1 < r1) {
          // The chunk is read once per token tile: bring the next one towards
          // L2 meanwhile (row-major rows and packed groups alike are one range).
          const int64_t c2 = std::min(r1, c1 + kChunkRows);
          const uint8_t* lo = packed != nullptr ? packed + size_t(c1 / kGroupRows) * gb
                                                : wdata + size_t(c1) * w_row;
          const size_t len = packed != nullptr
                                 ? size_t((c2 - c1 + kGroupRows - 1) / kGroupRows) * gb
                                 : size_t(c2 - c1) * w_row;
          for (size_t off = 0; off < len; off += 64)
            _mm_prefetch(reinterpret_cast<const char*>(lo + off), _MM_HINT_T1);
        }
        if (zmm_tiles) {
          OMNIBUS_DCHECK(c0 % kGroupRows == 0 && k1 > k0);  // avx512::group_tokens' contract
          for (int64_t g = c0 / kGroupRows; g * kGroupRows < c1; ++g) {
            avx512::group_tokens(w.type, packed + size_t(g) * gb, n, xa + k0 * n, k1 - k0,
                                 y + k0 * w.n_out + g * kGroupRows, w.n_out,
                                 int(std::min<int64_t>(kGroupRows, c1 - g * kGroupRows)));
          }
          continue;
        }
        for (int64_t t0 = k0; t0 < k1; t0 += kMaxTok) {
          const int T = int(std::min<int64_t>(kMaxTok, k1 - t0));
          const int R_max = T == 1 ? kRowsOne : kRowsMany;
          for (int64_t r = c0; r < c1;) {
            // Tiles never cross an 8-row group (the packed layout's unit).
            const int R = int(std::min<int64_t>({R_max, c1 - r, kGroupRows - r % kGroupRows}));
            const float* xt = xa + t0 * n;
            float* yt = y + t0 * w.n_out + r;
            if (packed != nullptr) {
              const Grouped<W> l{packed + size_t(r / kGroupRows) * gb, int(r % kGroupRows), n};
              run_tile(R, T, l, xt, n, yt, w.n_out);
            } else {
              run_tile(R, T, RowMajor<W>{wdata + size_t(r) * w_row, w_row, n}, xt, n, yt, w.n_out);
            }
            r += R;
          }
        }
      }
    }
  });
}

// Group g's rows (rows past n_out read as zeros) in Grouped's layout.
template <size_t kElem>
void pack_group(const WeightView& w, int64_t g, uint8_t* out) {
  const int64_t n = w.n_in, n8 = n - n % 8;
  const size_t w_row = dtype_row_size(w.type, n);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int r = 0; r < kGroupRows; ++r) {
    const int64_t row = g * kGroupRows + r;
    const uint8_t* src = row < w.n_out ? base + size_t(row) * w_row : nullptr;
    for (int64_t k = 0; k < n8; k += 8) {
      uint8_t* dst = out + size_t((k + r) * 8) * kElem;
      if (src != nullptr)
        std::memcpy(dst, src + size_t(k) * kElem, 8 * kElem);
      else
        std::memset(dst, 0, 8 * kElem);
    }
    uint8_t* tail = out + size_t(n8 * 8 + r * (n - n8)) * kElem;
    if (src != nullptr)
      std::memcpy(tail, src + size_t(n8) * kElem, size_t(n - n8) * kElem);
    else
      std::memset(tail, 0, size_t(n - n8) * kElem);
  }
}

}  // namespace

bool has_float_kernel(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::BF16;
}

size_t group_bytes(DType type, int64_t n_in) {
  const size_t bytes = size_t(n_in) * kGroupRows * (type == DType::F32 ? 4 : 2);
  return (bytes + 63) / 64 * 64;
}

void pack_groups(const WeightView& w, int64_t g0, int64_t g1, uint8_t* out) {
  OMNIBUS_CHECK(has_float_kernel(w.type));
  const size_t gb = group_bytes(w.type, w.n_in);
  const size_t used = size_t(w.n_in) * kGroupRows * (w.type == DType::F32 ? 4 : 2);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + size_t(g - g0) * gb;
    if (w.type == DType::F32)
      pack_group<4>(w, g, dst);
    else
      pack_group<2>(w, g, dst);
    std::memset(dst + used, 0, gb - used);  // padding: deterministic bytes
  }
}

void matmul(const WeightView& w, const uint8_t* packed, const float* x, int64_t n_tok, float* y,
            ThreadPool& pool, MatmulScratch& scratch) {
  OMNIBUS_CHECK(n_tok >= 1);
  switch (w.type) {
    case DType::F32:
      return run<F32>(w, packed, x, n_tok, y, pool, scratch);
    case DType::F16:
      return run<float_dot::F16>(w, packed, x, n_tok, y, pool, scratch);
    case DType::BF16:
      return run<float_dot::BF16>(w, packed, x, n_tok, y, pool, scratch);
    default:
      OMNIBUS_CHECK(false && "no float kernel for this type");
  }
}

const GroupedMatmulKernels kKernels{has_float_kernel, group_bytes, pack_groups, matmul};

}  // namespace omnibus::matmul_float
