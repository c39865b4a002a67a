// Activation tiles of the packed AVX2 matmul (matmul_packed_avx2.h): the
// input rows of kTok tokens quantized per block the way the reference
// quantizes a vec_dot's activations (Q8_0 / Q8_1 per 32 elements, Q8_K per
// 256), interleaved by token so a kernel reads one tile per weight block.
//
// Where isa() >= Isa::kAvx512, quantize_tile_k and the gated activation run
// the avx512 tier's code (matmul_act_avx512.h): bitwise the same bytes.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>

namespace omnibus::matmul_act {

inline constexpr int kTok = 4;  // tokens per activation tile (T <= kTok)

// What a tile quantizes: rows of x, or a gated FFN's activation of two row
// sets, act(x, up) (ops.h swiglu / geglu), computed a block at a time and
// never written out: bitwise the rows that swiglu / geglu would have written.
enum class Gate { kNone, kSwiglu, kGeglu };
struct TileInput {
  const float* x;
  const float* up = nullptr;  // REQUIRED unless gate == kNone
  Gate gate = Gate::kNone;
};

// Activations of kTok tokens for one 32-element block, quantized like
// Q8_0 / Q8_1 (d and s already converted from their fp16 values to f32, so the
// numbers are those of the reference). Lanes past the valid tokens are zero.
struct ActBlock32 {
  int8_t qs[kTok][32];
  float d[kTok];
  float s[kTok];  // fp16(d * sum(qs)) as f32 (Q8_1); unused for Q8_0 pairings
};
static_assert(sizeof(ActBlock32) == 160);

// Quantizes n_valid <= kTok tokens (rows of `in`, n_in floats each) into
// act[0..n_in / 32); s is filled when with_sum, and qsum (if not null) with
// the exact sums: qsum[b * kTok + t] = sum of act[b].qs[t] (the packed Q4_0 /
// Q5_0 kernels' offset term; kept out of ActBlock32 so that the other kernels'
// tiles stay small). Bit-exact with the reference Q8_0 / Q8_1 quantizers.
void quantize_tile(const TileInput& in, int64_t n_in, int64_t n_valid, bool with_sum,
                   ActBlock32* act, int32_t* qsum = nullptr);

// One token's activations for one 32-element block: the values quantize_tile
// gives its lane 0, 40 bytes a block instead of a tile's 160 (+ 16 of qsum).
// A decode step's single-group kernels (matmul_packed_internal.h, Ops::one)
// read these: a tile's blocks spread one token's 36 bytes over two or three
// cache lines, 18-20 KB of lines at n_in 4096 that every group re-reads while
// the weight stream prefetched ahead evicts them from L1 (Zen 4, 4096 x 14336
// Q4_0 at one token, one thread: 16.0-16.9 -> 22.7-25.4 GB/s;
// docs/performance.md, round (o)).
struct ActBlock1 {
  int8_t qs[32];
  float d;
  union {
    float s;       // as ActBlock32::s (with_sum)
    int32_t qsum;  // as quantize_tile's qsum (with_qsum; no format takes both)
  };
};
static_assert(sizeof(ActBlock1) == 40);

// quantize_tile of one token (in's row 0) into act[0..n_in / 32): s filled
// when with_sum, else qsum when with_qsum. REQUIRES: not both.
void quantize_row1(const TileInput& in, int64_t n_in, bool with_sum, bool with_qsum,
                   ActBlock1* act);

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
void quantize_tile_k(const TileInput& in, int64_t n_in, int64_t n_valid, ActBlockK* act);

}  // namespace omnibus::matmul_act
