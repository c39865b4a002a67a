#include "util/heap_trim.h"

#include <atomic>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace omnibus {

void set_heap_release_thresholds() {
#if defined(__GLIBC__)
  constexpr int kMmapThreshold = 4 << 20;
  constexpr int kTrimThreshold = 8 << 20;
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);  // also fixes both thresholds (no dynamic raise)
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
#endif
}

bool trim_heap() {
#if defined(__GLIBC__)
  static std::atomic<bool> busy{false};
  if (busy.exchange(true)) return false;
  malloc_trim(0);
  busy.store(false);
  return true;
#else
  return false;
#endif
}

}  // namespace omnibus
