// Returning freed heap memory to the operating system. glibc keeps what a
// program frees in its arenas, so after one request that built a large
// response the resident size stays near that peak. Two calls undo that:
//
//   set_heap_release_thresholds(), once at startup: blocks of 4 MiB and more
//     get mappings of their own (unmapped when freed), and an arena's free top
//     beyond 8 MiB is returned when it grows past that. glibc otherwise raises
//     both thresholds after the first large free (up to 32 and 64 MiB), and
//     malloc_trim never trims the top of a thread's arena, so a spike built
//     on another thread than main stayed resident.
//   trim_heap(), after a large response is gone: malloc_trim(0), which
//     returns every whole free page inside every arena.
//
// With another allocator than glibc's both do nothing.
//
// Thread-safety: any thread. While one trim_heap() runs, other calls return
// at once (what was freed behind the running trim waits for the next one).
#pragma once

namespace omnibus {

void set_heap_release_thresholds();

// Returns whether this call trimmed (false: another call was trimming, or no glibc).
bool trim_heap();

}  // namespace omnibus
