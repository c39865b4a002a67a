#include "kernels/ops_parallel.h"

namespace omnibus {

// The element-wise kernels go one row at a time, so that each element's
// position within a call (its SIMD lane, or the scalar tail) is its position
// in its row whatever the split.
void swiglu(const float* gate, const float* up, float* out, int64_t n_rows, int64_t n,
            ThreadPool& pool) {
  for_row_ranges(n_rows, n, pool, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) swiglu(gate + r * n, up + r * n, out + r * n, n);
  });
}

void geglu(const float* gate, const float* up, float* out, int64_t n_rows, int64_t n,
           ThreadPool& pool) {
  for_row_ranges(n_rows, n, pool, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) geglu(gate + r * n, up + r * n, out + r * n, n);
  });
}

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
              ThreadPool& pool) {
  for_row_ranges(
      n_rows, n, pool,
      [&](int64_t r0, int64_t r1) { rms_norm(x + r0 * n, w, y + r0 * n, r1 - r0, n, eps); },
      kRowOpsParallelMinElems);
}

// (element-wise: the same bits however the elements are split)
void add_inplace(float* y, const float* x, int64_t n_rows, int64_t n, ThreadPool& pool) {
  for_row_ranges(
      n_rows, n, pool,
      [&](int64_t r0, int64_t r1) { add_inplace(y + r0 * n, x + r0 * n, (r1 - r0) * n); },
      kRowOpsParallelMinElems);
}

void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim,
          const RopeParams& p, ThreadPool& pool) {
  const int64_t row = int64_t(n_heads) * head_dim;
  for_row_ranges(
      n_tok, row, pool,
      [&](int64_t t0, int64_t t1) { rope(x + t0 * row, pos + t0, t1 - t0, n_heads, head_dim, p); },
      kRowOpsParallelMinElems);
}

}  // namespace omnibus
