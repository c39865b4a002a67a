// Batched AVX2 matmul for unquantized weights (F32, F16, BF16; internal to
// matmul.cc).
//
// The activations are rounded once per call to the weight's vec_dot type
// (F16 / BF16, as the reference pairs them; F32 as is) and kept as f32.
// Register tiles of R weight rows x T tokens then share every load: a tile
// reads 8 elements of each of its R rows (converted to f32 once) and of each
// of its T tokens, and runs R x T FMA chains. Each output's arithmetic is
// float_dot_avx2.h's (8 lane chains over k, a fixed horizontal sum, a scalar
// tail) whatever R, T, the thread or n_tok: bitwise batch invariant and equal
// to quant_avx2's vec_dot of the type.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: as matmul().
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace omnibus::matmul_float {

// True for F32, F16 and BF16.
bool has_float_kernel(DType type);

// y[n_tok, n_out] = x[n_tok, n_in] W^T. REQUIRES has_float_kernel(w.type), n_tok >= 1.
void matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

}  // namespace omnibus::matmul_float
