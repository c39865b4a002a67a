// The avx512 tier's activation tiles (internal to matmul_act_avx2.cc, which
// dispatches here where isa() >= Isa::kAvx512): quantize_tile_k and the
// gated activation of every tile, 16 lanes at a time. Each is bitwise the
// avx2 tier's (the same IEEE operations per element, the same reduction
// orders where one is a float): matmul_act_test.cc holds them together,
// NaN, infinities and all-zero blocks included.
//
// REQUIRES: isa() >= Isa::kAvx512.
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul_act_avx2.h"

namespace omnibus::matmul_act::avx512 {

// matmul_act_avx2.h's quantize_tile_k. A gated input's activation of each
// super-block is made in registers and quantized from there (never written
// out), as Q8_K in one pass: its amax, sign element, quants and block sums.
void quantize_tile_k(const TileInput& in, int64_t n_in, int64_t n_valid, ActBlockK* act);

// n elements of act(x, up) (in.gate: swiglu or geglu) at offset `at` of
// in's rows into out: ops_avx2.cc's swiglu_avx2 / geglu_avx2 on 16 lanes.
// REQUIRES: in.gate != Gate::kNone.
void gated_span(const TileInput& in, size_t at, int64_t n, float* out);

}  // namespace omnibus::matmul_act::avx512
