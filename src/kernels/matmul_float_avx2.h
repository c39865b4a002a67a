// Batched AVX2 matmul for unquantized weights (F32, F16, BF16; internal to
// matmul.cc).
//
// The activations are rounded once per call to the weight's vec_dot type
// (F16 / BF16, as the reference pairs them; F32 as is) and kept as f32.
// Register tiles of R weight rows x T tokens then share every load: a tile
// reads 8 elements of each of its R rows (converted to f32 once) and of each
// of its T tokens, and runs R x T FMA chains. The weights are read in the
// GGUF's row-major layout, or packed at load (pack_groups) into groups of 8
// rows interleaved per 8 elements ([n8 / 8][8 rows][8 elements], then the
// tail [8 rows][n_in % 8]), so a single token's tiles read one linear stream
// instead of 8 short ones. Each output's arithmetic is
// float_dot_avx2.h's (8 lane chains over k, a fixed horizontal sum, a scalar
// tail) whatever R, T, the thread or n_tok: bitwise batch invariant and equal
// to quant_avx2's vec_dot of the type. At the avx512 tier, several tokens
// on packed groups run matmul_float_avx512.h's row-pair zmm tiles instead:
// the same per-output arithmetic, so the same bits.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: as matmul().
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul_grouped.h"

namespace omnibus::matmul_float {

inline constexpr int kGroupRows = kMatmulGroupRows;

// The family's calls (matmul_grouped.h); has_kernel: F32, F16 and BF16.
extern const GroupedMatmulKernels kKernels;

}  // namespace omnibus::matmul_float
