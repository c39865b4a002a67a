// The paged attention kernels' prefetch queue (attention_avx2.cc,
// attention_avx512.cc): cache lines to prefetch, issued one at a time from
// inside the compute loops, since a burst of a whole tile's lines overflows
// the core's outstanding miss slots and most of it is dropped. Once its own
// lines are issued, a queue goes on with those of `then` (the next tasks'
// first tiles, during this task's last tiles). Prefetches have no effect on
// any result.
//
// Plain data, and its operations as functions of internal linkage: every
// file that includes this (attention_avx2.cc, attention_avx512.cc, compiled
// with different ISA flags) gets its own copy, so no tier's copy can be the
// one the linker keeps for another (scripts/check_tier_symbols.sh).
//
// Thread-safety: one queue per thread (thread_local in attention_avx2.cc).
#pragma once

#include <xmmintrin.h>

namespace omnibus {

// Into L2, not L1: the lines come in as they would into L1 but leave L1 to
// the tile being computed. Llama-1B shape, 64 sequences x 192 positions,
// 2 threads, Sapphire Rapids Xeon (kv_microbench, A B x2-3): f16 from DRAM 3-7%
// faster than _MM_HINT_T0, q8 2-3% (docs/performance.md, round (s)).
constexpr auto kAttnPrefetchHint = _MM_HINT_T1;

struct AttnPrefetchQueue {
  static constexpr int kMax = 512;
  const char* line[kMax];
  int n = 0, i = 0;
  AttnPrefetchQueue* then = nullptr;
};

// Queues line p (dropped once the queue is full).
static inline void prefetch_add(AttnPrefetchQueue& q, const char* p) {
  if (q.n < AttnPrefetchQueue::kMax) q.line[q.n++] = p;
}

// Issues the next queued line, or else the next of q.then's.
static inline void prefetch_next(AttnPrefetchQueue& q) {
  if (q.i < q.n) {
    _mm_prefetch(q.line[q.i++], kAttnPrefetchHint);
  } else if (q.then != nullptr && q.then->i < q.then->n) {
    _mm_prefetch(q.then->line[q.then->i++], kAttnPrefetchHint);
  }
}

// Lines prefetch_next calls would still issue: q's, then q.then's.
static inline int prefetch_pending(const AttnPrefetchQueue& q) {
  return q.n - q.i + (q.then != nullptr ? q.then->n - q.then->i : 0);
}

// Issues every line still queued and empties the queue.
static inline void prefetch_flush(AttnPrefetchQueue& q) {
  while (q.i < q.n) _mm_prefetch(q.line[q.i++], kAttnPrefetchHint);
  q.n = q.i = 0;
}

}  // namespace omnibus
