// ReadProbe (read_probe.h): a timed sequential read of a touched buffer.
#include "kernels/read_probe.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "kernels/cpu_features.h"
#include "util/check.h"

namespace omnibus {
namespace {

// Four independent 256-bit accumulators: the adds never wait on each other,
// so the loop runs at the rate the loads arrive. kPrefetch: each iteration
// also asks for the lines kPrefetchAhead bytes on, into L2. On a Sapphire
// Rapids Xeon (2 threads, huge pages, stand-alone copies, the same minutes)
// that read 33-35 GiB/s at distances of 256 B to 2 KB (into L1 or L2 alike)
// against 26-29 without, and the gain fell away from 4 KB on (25.7 at 16 KB,
// and 29 with a 16 KB prefetch added to a 1 KB one): the lines are asked for
// just before the loads reach them, and the L2 streamer is left to run
// ahead. With it the loop read alike in both shapes tried (64 or 128 bytes
// an iteration), where without it the rate moved 15% with the loop's shape
// and placement (rounds (r) and (s) of docs/performance.md). A prefetch
// past the slice's end is harmless (prefetches never fault).
constexpr size_t kPrefetchAhead = 1024;

// kPrefetch false: no prefetch (ahead unused), the tight loop as it was.
template <bool kPrefetch,
          decltype(_MM_HINT_T0) kHint = _MM_HINT_T1>  // GCC: enum _mm_hint; clang: int
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t n, size_t ahead = 0) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    if constexpr (kPrefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead), kHint);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 64), kHint);
    }
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// The same sum with its accumulators kept in memory (a load, an add and a
// store each 32 bytes; the empty asm makes the compiler keep them there):
// it issues its reads more slowly, and on a Sapphire Rapids Xeon read more
// (2 threads, huge pages, a stand-alone copy of both: 32.3-32.7 GiB/s
// against sum_avx2<false>'s 26.4-28.5 in the same minutes; 8- and 16-load
// register loops, 512-bit loads, software prefetch 4-16 KB ahead and
// dependent multiplies between the loads read 12-30; round (r) of
// docs/performance.md). measure() takes the best of the three shapes.
__attribute__((target("avx2"))) uint64_t sum_avx2_paced(const uint8_t* p, size_t n) {
  alignas(32) uint64_t acc[4][4] = {};
  for (size_t i = 0; i + 128 <= n; i += 128) {
    const auto* q = reinterpret_cast<const __m256i*>(p + i);
    for (int k = 0; k < 4; ++k) {
      auto* a = reinterpret_cast<__m256i*>(acc[k]);
      _mm256_store_si256(a, _mm256_add_epi64(_mm256_load_si256(a), _mm256_load_si256(q + k)));
    }
    asm volatile("" ::: "memory");
  }
  uint64_t s = 0;
  for (const auto& lanes : acc) {
    for (uint64_t v : lanes) s += v;
  }
  return s;
}

}  // namespace

uint64_t read_probe_sum_scalar(const uint8_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    s += w;
  }
  return s;
}

uint64_t read_probe_sum(const uint8_t* p, size_t n, ReadShape shape) {
  assert(n % 128 == 0 && reinterpret_cast<uintptr_t>(p) % 32 == 0);
  if (!cpu_features().use_avx2()) return read_probe_sum_scalar(p, n);
  switch (shape) {
    case ReadShape::kPaced:
      return sum_avx2_paced(p, n);
    case ReadShape::kPrefetched:
      return sum_avx2<true>(p, n, kPrefetchAhead);
    case ReadShape::kTight:
      break;
  }
  return sum_avx2<false>(p, n);
}

uint64_t read_probe_sum_prefetching(const uint8_t* p, size_t n, size_t ahead, bool into_l2) {
  assert(n % 128 == 0 && reinterpret_cast<uintptr_t>(p) % 32 == 0);
  if (!cpu_features().use_avx2()) return read_probe_sum_scalar(p, n);
  if (ahead == 0) return sum_avx2<false>(p, n);
  return into_l2 ? sum_avx2<true, _MM_HINT_T1>(p, n, ahead)
                 : sum_avx2<true, _MM_HINT_T0>(p, n, ahead);
}

ReadProbe::ReadProbe(size_t bytes, bool huge_pages)
    : bytes_(bytes / (size_t(2) << 20) * (size_t(2) << 20)) {
  OMNIBUS_CHECK(bytes_ > 0);
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(huge_pages ? size_t(2) << 20 : 64, bytes_));
  OMNIBUS_CHECK(buf_ != nullptr);
  if (huge_pages) ::madvise(buf_, bytes_, MADV_HUGEPAGE);
  std::memset(buf_, 1, bytes_);  // every page resident before any timing
}

ReadProbe::~ReadProbe() { std::free(buf_); }

namespace {

// Seconds for read(t) on n_threads threads at once (the caller runs t = 0).
double timed_on_threads(int n_threads, const std::function<void(int)>& read) {
  OMNIBUS_CHECK(n_threads >= 1);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 1; t < n_threads; ++t) threads.emplace_back(read, t);
  read(0);
  for (std::thread& th : threads) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The fastest of `passes` rounds of pass(shape) in every ReadShape, in
// seconds: the probe's ceiling (a slower pass is interference or a loop's
// pace, not the memory's limit).
double fastest_pass(int passes, const std::function<double(ReadShape)>& pass) {
  double best = std::numeric_limits<double>::infinity();
  for (int p = 0; p < passes; ++p) {
    for (ReadShape shape : {ReadShape::kTight, ReadShape::kPaced, ReadShape::kPrefetched})
      best = std::min(best, pass(shape));
  }
  return best;
}

}  // namespace

size_t ReadProbe::pass_bytes(int n_threads) const {
  return bytes_ / size_t(n_threads) / 128 * 128 * size_t(n_threads);
}

double ReadProbe::read_pass(int n_threads, ReadShape shape) const {
  return timed_pass(n_threads,
                    [shape](const uint8_t* p, size_t n) { return read_probe_sum(p, n, shape); });
}

double ReadProbe::read_pass_prefetching(int n_threads, size_t ahead, bool into_l2) const {
  return timed_pass(n_threads, [ahead, into_l2](const uint8_t* p, size_t n) {
    return read_probe_sum_prefetching(p, n, ahead, into_l2);
  });
}

double ReadProbe::timed_pass(int n_threads,
                             const std::function<uint64_t(const uint8_t*, size_t)>& sum) const {
  const size_t slice = pass_bytes(n_threads) / size_t(n_threads);
  std::vector<uint64_t> sums(size_t(n_threads), 0);
  const double s = timed_on_threads(
      n_threads, [&](int t) { sums[size_t(t)] = sum(buf_ + size_t(t) * slice, slice); });
  // Every byte is 1: each slice sums to slice / 8 words of 0x0101...01.
  for (uint64_t v : sums) OMNIBUS_CHECK(v == uint64_t(slice / 8) * 0x0101010101010101ull);
  return s;
}

double read_spans(std::span<const std::span<const uint8_t>> spans, int n_threads, int passes,
                  size_t* bytes) {
  OMNIBUS_CHECK(n_threads >= 1 && passes >= 1);
  auto share = [n_threads](const std::span<const uint8_t>& s) {
    return s.size() / size_t(n_threads) / 128 * 128;
  };
  *bytes = 0;
  for (const std::span<const uint8_t>& s : spans) {
    OMNIBUS_CHECK(reinterpret_cast<uintptr_t>(s.data()) % 32 == 0);
    *bytes += share(s) * size_t(n_threads);
  }
  std::vector<uint64_t> sums(size_t(n_threads), 0);
  const double best = fastest_pass(passes, [&](ReadShape shape) {
    return timed_on_threads(n_threads, [&](int t) {
      uint64_t sum = 0;
      for (const std::span<const uint8_t>& s : spans) {
        const size_t n = share(s);
        sum += read_probe_sum(s.data() + size_t(t) * n, n, shape);
      }
      sums[size_t(t)] = sum;
    });
  });
  // the sums are the weights' bytes, unknown here: only kept from being optimised away
  asm volatile("" : : "r"(sums.data()) : "memory");
  return best;
}

double ReadProbe::measure(int n_threads, int passes) const {
  OMNIBUS_CHECK(n_threads >= 1 && passes >= 1);
  return double(pass_bytes(n_threads)) /
         fastest_pass(passes, [&](ReadShape shape) { return read_pass(n_threads, shape); });
}

}  // namespace omnibus
