// Software prefetch of the packed weight stream (matmul_packed_internal.h):
// how far ahead each kernel asks for its groups' lines, and into which cache.
// Included by matmul_packed_internal.h after it has chosen the tier
// (OMNIBUS_PACKED_TIER): the functions live in the tier's namespace, as
// everything there does.
//
// Thread-safety: stateless functions.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#ifndef OMNIBUS_PACKED_TIER
#error "include kernels/matmul_packed_internal.h, which chooses the tier"
#endif

namespace omnibus::matmul_packed::internal {

#ifndef OMNIBUS_PACKED_PREFETCH
#define OMNIBUS_PACKED_PREFETCH 8192
#endif
#ifndef OMNIBUS_PACKED_PREFETCH_FAR
#define OMNIBUS_PACKED_PREFETCH_FAR 16384
#endif
// Software prefetch distances, in bytes ahead of the quants being read (the
// packed matrix is one linear stream, so they also cover the next group). A
// decode token reads each weight once, so the distance must cover the DRAM
// latency at the rate one core consumes (~25 GB/s x ~150 ns in a VM: ~4 KB,
// more while the memory is busy). 0 turns one off (benchmarks).
//   near  into L1, by every kernel of a call whose rows are short (n_in <
//         kFarMinIn: the small models), and by the single-group kernels
//   far   into L2, by every kernel of a call of long rows (the pair kernels
//         instead of near)
// Measured on EPYC Zen 5 for near alone (1024 bytes left Q6_K at 8-12 GiB/s
// and Q4_K at 13-16, 8192 gave 16-24 and 15-22; into L1 rather than L2 -10%
// / -13% time: round (k) of docs/performance.md), and on an EPYC Zen 4
// (avx512 tier, kernels_microbench Stream_*, A B rounds, round (p)): adding
// far, one token on one thread (single groups), Q4_K 4096 x 14336 22.4 ->
// 27.6 GB/s, 14336 x 4096 20.2 -> 26.6, Q4_0 14336 x 4096 20.7 -> 27.4; the
// pair kernels (4-16 tokens, 2 threads) 15-40% faster with far alone (4
// tokens: Q4_K 22.1 -> 27.5, Q6_K 19.4 -> 27.4, Q4_0 23.1 -> 26.9) and 20-50%
// slower with both; but the rows of SmolLM2 (n_in 576: Q8_0 576 x 49152,
// Q4_1 576 x 1536 and x 4608) 6-9% slower with far, whichever near.
inline constexpr size_t kPrefetchNear = OMNIBUS_PACKED_PREFETCH;
inline constexpr size_t kPrefetchFar = OMNIBUS_PACKED_PREFETCH_FAR;
inline constexpr int64_t kFarMinIn = 2048;

namespace OMNIBUS_PACKED_TIER {

// Every helper here is always_inline, and must stay so. GCC 12's IPA
// mod/ref analysis takes a function whose only statements are prefetches for
// free of side effects, and deletes the calls to it where it was not inlined
// early: from de97dff to 22fbd85 the avx512 wide pair kernels and the amx
// kernels carried no prefetch instruction at all (prefetch_groups_at's calls
// gone), and the few-token steps ran at half speed on a Sapphire Rapids Xeon
// (Q4_K 4096 x 14336 at 4 tokens, 2 threads: 17 GB/s against 30;
// docs/performance.md, round (q)). -fno-ipa-modref or always_inline keeps
// them; an asm volatile prefetch kept them too, but as a scheduling barrier
// it cost the one-token pair kernels ~5%. scripts/check_prefetch.sh (ctest
// kernels_prefetch) counts the prefetch instructions of every packed tier
// object and of each wide kernel.

// _mm_prefetch of the line holding p into Hint's cache.
template <decltype(_MM_HINT_T0) Hint>  // GCC: enum _mm_hint; clang: int
[[gnu::always_inline]] inline void prefetch_line(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), Hint);
}

// Whether a call of rows of n_in elements prefetches far (kernels take it
// from their block count, once per call).
inline bool prefetch_far(int64_t n_in) { return n_in >= kFarMinIn; }

// kernel(std::true_type{}) where a call of rows of n_in elements prefetches
// far, else kernel(std::false_type{}): for kernels that take the distance as
// a template argument, so their loop tests no run-time flag (one did in the
// wide pair kernels, ~10% slower than either distance compiled in: round (q)).
template <class Kernel>
[[gnu::always_inline]] inline void with_prefetch_far(int64_t n_in, Kernel&& kernel) {
  if (prefetch_far(n_in))
    kernel(std::true_type{});
  else
    kernel(std::false_type{});
}

// A single-group kernel's stream: near, and far where `far`.
[[gnu::always_inline]] inline void prefetch(const uint8_t* p, bool far) {
  if constexpr (kPrefetchNear > 0) prefetch_line<_MM_HINT_T0>(p + kPrefetchNear);
  if constexpr (kPrefetchFar > 0) {
    if (far) prefetch_line<_MM_HINT_T1>(p + kPrefetchFar);
  }
}

// prefetch() of every cache line of [p, p + Bytes): a kernel that consumes
// Bytes per step calls it once per step, so no line of its stream is missed
// (a missed line is a demand miss the loop waits for).
template <size_t Bytes>
[[gnu::always_inline]] inline void prefetch_span(const uint8_t* p, bool far) {
  for (size_t off = 0; off < Bytes; off += 64) prefetch(p + off, far);
}

// Moves offset `off` of a group of a stream of groups walked side by side
// to where it lies in that stream: an offset past a group's gb bytes runs on
// into the stream's next unit of groups, `advance` bytes on each time.
// Returns how far the groups moved; off is then within a group.
[[gnu::always_inline]] inline size_t units_ahead(size_t gb, size_t advance, size_t& off) {
  size_t on = 0;
  while (off >= gb) off -= gb, on += advance;
  return on;
}

// units_ahead for N adjacent groups (group i = group0 + i gb bytes): the
// next unit is the next N (+N gb each time), not group 1, which is being
// read already. Group i's byte is then group0 + i gb + off.
template <size_t N>
[[gnu::always_inline]] inline void groups_ahead(const uint8_t*& group0, size_t gb, size_t& off) {
  group0 += units_ahead(gb, N * gb, off);
}

// The lines [at, at + Bytes) + dist of each of N adjacent groups walked side
// by side (groups_ahead), into Hint's cache.
template <size_t Bytes, size_t N, decltype(_MM_HINT_T0) Hint>  // GCC: enum _mm_hint; clang: int
[[gnu::always_inline]] inline void prefetch_groups_at(const uint8_t* group0, size_t gb, size_t at,
                                                      size_t dist) {
  size_t off = at + dist;
  groups_ahead<N>(group0, gb, off);
  for (size_t l = 0; l < Bytes; l += 64) {
    for (size_t g = 0; g < N; ++g) prefetch_line<Hint>(group0 + g * gb + off + l);
  }
}

// A kernel's stream of N groups side by side, at offset `at` of each: far
// where `far`, else near.
template <size_t Bytes, size_t N>
[[gnu::always_inline]] inline void prefetch_groups_span(const uint8_t* group0, size_t gb, size_t at,
                                                        bool far) {
  if (far) {
    if constexpr (kPrefetchFar > 0)
      prefetch_groups_at<Bytes, N, _MM_HINT_T1>(group0, gb, at, kPrefetchFar);
  } else if constexpr (kPrefetchNear > 0) {
    prefetch_groups_at<Bytes, N, _MM_HINT_T0>(group0, gb, at, kPrefetchNear);
  }
}

// The pair kernels' (N = 2).
template <size_t Bytes>
[[gnu::always_inline]] inline void prefetch_pair_span(const uint8_t* group0, size_t gb, size_t at,
                                                      bool far) {
  prefetch_groups_span<Bytes, 2>(group0, gb, at, far);
}

// A super-block's prefetch (its lines a distance ahead in the stream of N
// groups, as prefetch_groups_span), issued a few lines at a time between
// the amx kernels' tile steps (matmul_packed_kquants_amx.cc) instead of in
// one burst. A burst of the whole super-block
// (54 lines of a Q6_K pair) filled the core's line fill buffers: its
// prefetch instructions took ~21% of a 64-token call's samples (2048 x
// 128256 Q6_K, 1 thread, Sapphire Rapids Xeon) while the tile unit waited
// behind them. Spread (kernels_microbench Stream_, 2 threads, A B x2-3):
// 64 tokens Q4_K +4-22%, Q6_K +5-19% (the 1B head 2048 x 128256: 5.7 ->
// 6.8-6.9 GB/s), 512 tokens within noise; Q6_K's long layout (16 steps a
// pair) takes a share of the lines too (16 tokens +10-30%, 64 and 512
// unchanged), Q4_K's short one does not (there 16 tokens -10%, 64 +3%).
// The stream is N groups as N / 2 pairs of adjacent groups (gb apart),
// pair p's first group at pairs[p]: a pair or a quad of one matrix (pair 1
// at pair 0 + 2 gb, the next unit's groups N gb on: `advance`), or the amx
// tier's gated quads (a pair of W_gate and the same pair of W_up, the next
// unit's 2 gb on in each matrix).
template <size_t Bytes, size_t N>
struct SpreadPrefetch {
  static_assert(N % 2 == 0);
  static constexpr int kLines = int(N * ((Bytes + 63) / 64));
  const uint8_t* pair[N / 2] = {};  // each pair's first line to fetch
  size_t gb = 0;
  int next = kLines;  // lines issued so far
  bool far = false;

  // Issues the previous super-block's remaining lines, then queues this
  // one's: [at, at + Bytes) + the distance of each group (units_ahead).
  [[gnu::always_inline]] inline void start(const uint8_t* const (&pairs)[N / 2], size_t group_bytes,
                                           size_t advance, size_t at, bool far_) {
    step(kLines);
    far = far_;
    gb = group_bytes;
    size_t off = at + (far ? kPrefetchFar : kPrefetchNear);
    const size_t on = units_ahead(gb, advance, off);
    for (size_t p = 0; p < N / 2; ++p) pair[p] = pairs[p] + on + off;
    next = 0;
  }
  // Issues up to n of the queued lines (line i: group i % N, i / N lines on).
  [[gnu::always_inline]] inline void step(int n) {
    for (const int end = std::min(kLines, next + n); next < end; ++next) {
      const int g = next % int(N);
      const uint8_t* line = pair[g / 2] + size_t(g % 2) * gb + size_t(next / int(N)) * 64;
      if (far) {
        prefetch_line<_MM_HINT_T1>(line);
      } else {
        prefetch_line<_MM_HINT_T0>(line);
      }
    }
  }
};

}  // namespace OMNIBUS_PACKED_TIER
}  // namespace omnibus::matmul_packed::internal
