// OMNIBUS_CHECK: invariants that hold unless omnibus itself has a bug.
//
// Unlike assert(), checks stay on in release builds: a broken invariant in the
// KV cache or scheduler must stop the process loudly, not corrupt answers.
// Use Status for anything a user's input can cause. OMNIBUS_DCHECK is for hot
// loops and compiles away under NDEBUG.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace omnibus::detail {
[[noreturn]] inline void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "omnibus: invariant violated: %s at %s:%d\n", expr, file, line);
  std::abort();
}
}  // namespace omnibus::detail

#define OMNIBUS_CHECK(cond) \
  ((cond) ? (void)0 : ::omnibus::detail::check_failed(#cond, __FILE__, __LINE__))

#ifdef NDEBUG
#define OMNIBUS_DCHECK(cond) ((void)0)
#else
#define OMNIBUS_DCHECK(cond) OMNIBUS_CHECK(cond)
#endif
