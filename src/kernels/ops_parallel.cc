#include "kernels/ops_parallel.h"

#include <algorithm>

#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus {

void for_row_ranges(int64_t n_rows, int64_t row_elems, ThreadPool& pool,
                    const std::function<void(int64_t r0, int64_t r1)>& fn) {
  OMNIBUS_DCHECK(n_rows >= 0 && row_elems >= 0);
  const int64_t n_tasks = std::min<int64_t>(pool.n_threads(), n_rows);
  if (n_tasks <= 1 || n_rows * row_elems < kOpsParallelMinElems) {
    if (n_rows > 0) fn(0, n_rows);
    return;
  }
  pool.parallel_for(n_tasks, [&](int64_t t, int) {
    fn(n_rows * t / n_tasks, n_rows * (t + 1) / n_tasks);
  });
}

// The element-wise kernels go one row at a time, so that each element's
// position within a call (its SIMD lane, or the scalar tail) is its position
// in its row whatever the split.
void swiglu(const float* gate, const float* up, float* out, int64_t n_rows, int64_t n, ThreadPool& pool) {
  for_row_ranges(n_rows, n, pool, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) swiglu(gate + r * n, up + r * n, out + r * n, n);
  });
}

void geglu(const float* gate, const float* up, float* out, int64_t n_rows, int64_t n, ThreadPool& pool) {
  for_row_ranges(n_rows, n, pool, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) geglu(gate + r * n, up + r * n, out + r * n, n);
  });
}

}  // namespace omnibus
