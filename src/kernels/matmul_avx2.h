// Register-tiled AVX2 matmul kernels for Q4_0, Q5_1 and Q5_K (internal to
// matmul.cc; Q4_1, Q5_0, Q8_0, Q4_K and Q6_K use matmul_packed_avx2.h),
// and the activation tiles both share.
//
// A tile is R weight rows x T tokens: each weight block is unpacked once and
// dotted against T activation blocks, R*T sums live in registers. Every
// output element sees the same sequence of operations whatever R, T, the
// thread or n_tok (partial tiles are the same template with smaller R / T),
// so results are bitwise batch invariant — and equal to quant_avx2's vec_dot.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: as matmul().
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace omnibus::matmul_avx2 {

inline constexpr int kTok = 4;  // tokens per activation tile (T <= kTok)

// Activations of kTok tokens for one 32-element block, quantized like
// Q8_0 / Q8_1 (d and s already converted from their fp16 values to f32, so the
// numbers are those of the reference). Lanes past the valid tokens are zero.
struct ActBlock32 {
  int8_t qs[kTok][32];
  float d[kTok];
  float s[kTok];  // fp16(d * sum(qs)) as f32 (Q8_1); unused for Q8_0 pairings
};
static_assert(sizeof(ActBlock32) == 160);

// Quantizes n_valid <= kTok tokens (rows of x, n_in floats each) into
// act[0..n_in / 32); s is filled when with_sum, and qsum (if not null) with
// the exact sums: qsum[b * kTok + t] = sum of act[b].qs[t] (the packed Q5_0
// kernel's offset term; kept out of ActBlock32 so that the other kernels'
// tiles stay small). Bit-exact with the reference Q8_0 / Q8_1 quantizers.
void quantize_tile(const float* x, int64_t n_in, int64_t n_valid, bool with_sum, ActBlock32* act,
                   int32_t* qsum = nullptr);

// Q8_K activations of kTok tokens for one 256-element super-block (lanes
// past the valid tokens are zero).
struct ActBlockK {
  int8_t qs[kTok][256];
  float d[kTok];
  int16_t bsums[kTok][16];      // sums of qs[16j..16j+16)
  int16_t bsum_pairs[kTok][8];  // bsums[2j] + bsums[2j + 1]: sums of the 32-element sub-blocks
};

// quantize_tile for the K-quants: act[0..n_in / 256), bit-exact with the
// reference Q8_K quantizer.
void quantize_tile_k(const float* x, int64_t n_in, int64_t n_valid, ActBlockK* act);

// True if `type` has a tiled kernel here.
bool has_tiled_kernel(DType type);

// REQUIRES has_tiled_kernel(w.type), n_tok >= 1.
void matmul_tiled(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                  MatmulScratch& scratch);

}  // namespace omnibus::matmul_avx2
