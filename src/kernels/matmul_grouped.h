// Internal to the kernels' matmul: what each AVX2 family that reads weights in
// groups of 8 rows provides (matmul_packed_avx2.h: quantized types;
// matmul_float_avx2.h: F32 / F16 / BF16), so that matmul.cc packs and
// dispatches both the same way. A packed matrix is ceil(n_out / 8) groups of
// group_bytes each; rows past n_out and the padding are zeros.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: as matmul(); the tables are constant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"

namespace omnibus {

inline constexpr int kMatmulGroupRows = 8;

struct GroupedMatmulKernels {
  // True for the types this family multiplies.
  bool (*has_kernel)(DType type);
  // Bytes of one packed group of rows of n_in elements (a multiple of 64).
  size_t (*group_bytes)(DType type, int64_t n_in);
  // Packs groups [g0, g1) of w into out (group g0 first, group_bytes apart).
  // REQUIRES has_kernel(w.type); quantized types: w.n_in % 32 == 0.
  void (*pack_groups)(const WeightView& w, int64_t g0, int64_t g1, uint8_t* out);
  // y[n_tok, n_out] = x[n_tok, n_in] W^T, reading `packed` (pack_groups of
  // all of w) or, if null, w itself: bitwise the same either way.
  // REQUIRES has_kernel(w.type), n_tok >= 1.
  void (*matmul)(const WeightView& w, const uint8_t* packed, const float* x, int64_t n_tok,
                 float* y, ThreadPool& pool, MatmulScratch& scratch);
};

}  // namespace omnibus
