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

}  // namespace omnibus
