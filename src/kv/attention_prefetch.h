// The paged attention kernels' prefetch queue (attention_avx2.cc,
// attention_avx512.cc): cache lines to prefetch, issued one at a time from
// inside the compute loops, since a burst of a whole tile's lines overflows
// the core's outstanding miss slots and most of it is dropped. Once its own
// lines are issued, a queue goes on with those of `then` (the next tasks'
// first tiles, during this task's last tiles). Prefetches have no effect on
// any result.
//
// Plain data plus inline members: a tier's kernel file (compiled with other
// ISA flags) must not call the members, or their copies could be the ones the
// linker keeps (scripts/check_tier_symbols.sh); it issues lines with its own
// copy of next() instead.
//
// Thread-safety: one queue per thread (thread_local in attention_avx2.cc).
#pragma once

#include <xmmintrin.h>

namespace omnibus {

struct AttnPrefetchQueue {
  static constexpr int kMax = 512;
  const char* line[kMax];
  int n = 0, i = 0;
  AttnPrefetchQueue* then = nullptr;
  void add(const char* p) {
    if (n < kMax) line[n++] = p;
  }
  void next() {
    if (i < n) {
      _mm_prefetch(line[i++], _MM_HINT_T0);
    } else if (then != nullptr && then->i < then->n) {
      _mm_prefetch(then->line[then->i++], _MM_HINT_T0);
    }
  }
  void flush() {
    while (i < n) _mm_prefetch(line[i++], _MM_HINT_T0);
    n = i = 0;
  }
};

}  // namespace omnibus
