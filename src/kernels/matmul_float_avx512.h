// The avx512 tier's many-token tile for packed F32 / F16 / BF16 groups
// (internal to matmul_float_avx2.cc).
//
// One call multiplies a whole 8-row packed group (matmul_float_avx2.h's
// Grouped layout) by n_tok tokens, 6 at a time: each zmm register holds two
// rows' 8-lane chains (rows 2p and 2p + 1 are 16 adjacent elements of the
// layout) against one token's 8 activations broadcast to both halves, so a
// step over 8 elements is 4 weight loads, 6 activation loads and 24 FMAs on
// 32 registers. Every output keeps float_dot_avx2.h's arithmetic exactly
// (the same 8 lane chains over k, the same horizontal sum of the 8 lanes,
// the same scalar tail): bitwise the avx2 tier's result.
//
// REQUIRES: isa() >= Isa::kAvx512.
// Thread-safety: pure function of its arguments.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace omnibus::matmul_float::avx512 {

// Tokens per register tile: 4 row pairs x 6 tokens of accumulators, 4 weight
// vectors and 1 token vector fill the 32 registers.
inline constexpr int kTokensPerTile = 6;

// y[t * y_stride + r] = row r of `group` . x[t * n .. + n) for r < rows
// (<= 8; the group's padding rows are computed, not stored), t < n_tok.
// x holds the activations already rounded to the weight's vec_dot type.
void group_tokens(DType type, const uint8_t* group, int64_t n, const float* x, int64_t n_tok,
                  float* y, int64_t y_stride, int rows);

}  // namespace omnibus::matmul_float::avx512
