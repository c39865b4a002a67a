// Memory read bandwidth probe: how many bytes per second the cores can stream
// from DRAM, the ceiling of single-stream decode (which reads every weight
// once per token). docs/performance.md states decode GB/s as a fraction of
// this figure (tools/bench/isa_tiers.sh runs both).
//
//   kernels_microbench --benchmark_filter=ReadBandwidth
//
// Each thread sums its own slice of a 1 GiB buffer (far beyond the caches)
// with 256-bit loads (read_probe_sum, the loops `omnibus bench --read-probe`
// uses, which takes the best of the three shapes); bytes_per_second is the
// total over threads. Arguments: threads, then 1 for a buffer on transparent
// huge pages (as the packed weights are, kernels/matmul.cc) or 0 for 4 KiB
// pages (a TLB miss and a page walk every 4 KiB, and the hardware
// prefetchers stop at each page's end: the lower figure), then the shape (0
// kTight, 1 kPaced, 2 kPrefetched: read_probe.h). ReadPrefetchSweep: the
// tight loop at several prefetch distances (below).
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/read_probe.h"

namespace omnibus {
namespace {

constexpr size_t kBytes = size_t(1) << 30;

void BM_ReadBandwidth(benchmark::State& state) {
  if (!cpu_features().supports(Isa::kAvx2)) {
    state.SkipWithError("needs AVX2");
    return;
  }
  const int n_threads = int(state.range(0));
  const ReadProbe probe(kBytes, state.range(1) != 0);
  const ReadShape shape = ReadShape(state.range(2));
  for (auto _ : state) probe.read_pass(n_threads, shape);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(probe.pass_bytes(n_threads)));
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgsProduct({{1, 2}, {0, 1}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The sweep that chose kPrefetched's distance (docs/performance.md, round
// (s)): the probe's tight loop with a software prefetch `ahead` bytes on (0:
// none) into L2 (hint 1, prefetcht1) or L1 (hint 0, prefetcht0), each thread
// over its own slice of a 1 GiB buffer on huge pages. Arguments: threads,
// ahead, hint.
template <int kHint>
__attribute__((target("avx2"))) uint64_t sum_prefetching(const uint8_t* p, size_t n, size_t ahead) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    if (ahead > 0) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead), _mm_hint(kHint));
      _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 64), _mm_hint(kHint));
    }
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

void BM_ReadPrefetchSweep(benchmark::State& state) {
  if (!cpu_features().supports(Isa::kAvx2)) {
    state.SkipWithError("needs AVX2");
    return;
  }
  const int n_threads = int(state.range(0));
  const size_t ahead = size_t(state.range(1));
  auto* fn = state.range(2) != 0 ? sum_prefetching<_MM_HINT_T1> : sum_prefetching<_MM_HINT_T0>;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(size_t(2) << 20, kBytes));
  ::madvise(buf, kBytes, MADV_HUGEPAGE);
  std::memset(buf, 1, kBytes);
  const size_t slice = kBytes / size_t(n_threads) / 128 * 128;
  std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int t = 1; t < n_threads; ++t)
      threads.emplace_back([&, t] { sums[size_t(t)] = fn(buf + size_t(t) * slice, slice, ahead); });
    sums[0] = fn(buf, slice, ahead);
    for (std::thread& th : threads) th.join();
    benchmark::DoNotOptimize(sums.data());
  }
  for (uint64_t v : sums) {
    if (v != uint64_t(slice / 8) * 0x0101010101010101ull) state.SkipWithError("wrong sum");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(slice) * n_threads);
  std::free(buf);
}
BENCHMARK(BM_ReadPrefetchSweep)
    ->ArgsProduct({{2}, {0, 256, 512, 1024, 2048, 3072, 4096, 8192, 16384}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace omnibus
