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
// to quant_avx2's vec_dot of the type.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: as matmul().
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"

namespace omnibus::matmul_float {

inline constexpr int kGroupRows = 8;

// True for F32, F16 and BF16.
bool has_float_kernel(DType type);

// Bytes of one packed group (a multiple of 64) and of the packed matrix.
size_t group_bytes(DType type, int64_t n_in);
size_t packed_size(const WeightView& w);

// Packs groups [g0, g1) of w into out (group_bytes apart; rows past n_out
// and the padding are zeros). REQUIRES has_float_kernel(w.type).
void pack_groups(const WeightView& w, int64_t g0, int64_t g1, uint8_t* out);

// y[n_tok, n_out] = x[n_tok, n_in] W^T, reading `packed` (pack_groups of all
// of w) or, if null, w itself: bitwise the same either way.
// REQUIRES has_float_kernel(w.type), n_tok >= 1.
void matmul(const WeightView& w, const uint8_t* packed, const float* x, int64_t n_tok, float* y,
            ThreadPool& pool, MatmulScratch& scratch);

}  // namespace omnibus::matmul_float
