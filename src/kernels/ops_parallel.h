// Row-parallel forms of ops.h's row-wise kernels (the gated activations,
// rms_norm, rope, the residual add), for a forward pass's [n_rows, n]
// activations (one row per token). The rows are split into contiguous
// ranges over the pool and each row goes through the single-thread ops.h
// kernel on its own, so each element's position within a call (its SIMD
// lane, or the scalar tail) is its position in its row: the bits are the
// same for any split, thread count or batch composition. Inputs under
// kOpsParallelMinElems elements run inline on the caller (a pool job costs
// a few microseconds, more than a single-token row takes).
//
// At 64 tokens per step swiglu is ~1.4% of the CPU samples, all on the
// engine thread while the other workers wait; splitting it gave +3..5%
// output tok/s (A/B, 64 x 128/128 on SmolLM2). rms_norm, rope and the
// residual add are memory-bound and cheaper than a pool job's hand-off of
// their rows to another core at such steps (split from kOpsParallelMinElems
// they measured no better), so they split only from kRowOpsParallelMinElems
// (128 tokens of the 1B's 2048): a prompt's 512 tokens of them were ~2.7% of
// a 1B-shaped pp512's samples, all on one thread (docs/performance.md,
// round (v)).
//
// Thread-safety: as ThreadPool::parallel_for (the pool's owning thread).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/thread_pool.h"

namespace omnibus {

inline constexpr int64_t kOpsParallelMinElems = 16384;
inline constexpr int64_t kRowOpsParallelMinElems = int64_t(1) << 18;

// swiglu / geglu of [n_rows, n] gate and up rows; out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n_rows, int64_t n,
            ThreadPool& pool);
void geglu(const float* gate, const float* up, float* out, int64_t n_rows, int64_t n,
           ThreadPool& pool);

// rms_norm of ops.h on [n_rows, n] rows; y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps,
              ThreadPool& pool);
// y += x on [n_rows, n] rows.
void add_inplace(float* y, const float* x, int64_t n_rows, int64_t n, ThreadPool& pool);
// rope of ops.h on [n_tok, n_heads, head_dim] rows.
void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim,
          const RopeParams& p, ThreadPool& pool);

// Runs fn(r0, r1) over contiguous row ranges covering [0, n_rows): inline
// when n_rows * row_elems < min_elems, else one range per thread.
// (A template, so that fn is not wrapped in a std::function on the step path.)
template <typename Fn>
void for_row_ranges(int64_t n_rows, int64_t row_elems, ThreadPool& pool, const Fn& fn,
                    int64_t min_elems = kOpsParallelMinElems) {
  const int64_t n_tasks = std::min<int64_t>(pool.n_threads(), n_rows);
  if (n_tasks <= 1 || n_rows * row_elems < min_elems) {
    if (n_rows > 0) fn(int64_t(0), n_rows);
    return;
  }
  pool.parallel_for(n_tasks,
                    [&](int64_t t, int) { fn(n_rows * t / n_tasks, n_rows * (t + 1) / n_tasks); });
}

}  // namespace omnibus
