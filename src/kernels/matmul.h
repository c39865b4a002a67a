// Batched matrix multiplication against a (usually quantized) weight matrix:
//
//   y[t, r] = sum_k W[r, k] * x[t, k]
//   W: [n_out, n_in] in dtype w.type (row r is dtype_row_size(type, n_in) bytes)
//   x: [n_tok, n_in] f32, y: [n_tok, n_out] f32 (row-major, row stride n_in / n_out)
//
// The activations are quantized once to the weight type's vec_dot_type, then
// each weight block is read once for a whole tile of tokens: a step with many
// tokens costs little more memory traffic than a step with one. This is what
// makes batching pay.
//
// Batch invariance (asserted by tests): y[t, r] is bitwise identical whatever
// n_tok is, whichever other rows of x share the call, and whichever thread or
// tile computed it — every output element uses one fixed reduction order.
//
// Thread-safety: the caller owns `scratch`; one matmul at a time per scratch.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace omnibus {

class ThreadPool;

struct WeightView {
  DType type;
  const void* data;  // n_out rows of dtype_row_size(type, n_in) bytes
  int64_t n_in;      // columns (the reduced dimension)
  int64_t n_out;     // rows
};

// Reusable buffers so that matmul does not allocate once the engine is warm.
struct MatmulScratch {
  std::vector<uint8_t> quantized_x;
};

void matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// Scalar reference: quantizes x with the reference from_float of vec_dot_type
// and calls dtype_traits_ref().vec_dot for every (t, r). The definition of correct.
void matmul_ref(const WeightView& w, const float* x, int64_t n_tok, float* y);

}  // namespace omnibus
