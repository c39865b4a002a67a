// Register-tiled AVX2 matmul kernels (internal to matmul.cc).
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

// True if `type` has a tiled kernel here.
bool has_tiled_kernel(DType type);

// REQUIRES has_tiled_kernel(w.type), n_tok >= 1.
void matmul_tiled(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                  MatmulScratch& scratch);

}  // namespace omnibus::matmul_avx2
