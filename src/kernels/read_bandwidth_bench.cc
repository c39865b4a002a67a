// Memory read bandwidth probe: how many bytes per second the cores can stream
// from DRAM, the ceiling of single-stream decode (which reads every weight
// once per token). docs/performance.md states decode GB/s as a fraction of
// this figure (tools/bench/isa_tiers.sh runs both).
//
//   kernels_microbench --benchmark_filter=ReadBandwidth
//
// Each thread sums its own slice of a 1 GiB buffer (far beyond the caches)
// with 256-bit loads and several independent accumulators (read_probe_sum,
// the loop `omnibus bench --read-probe` uses); bytes_per_second
// is the total over threads. Arguments: threads, then 1 for a buffer on
// transparent huge pages (as the packed weights are, kernels/matmul.cc) or 0
// for 4 KiB pages (a TLB miss and a page walk every 4 KiB, and the hardware
// prefetchers stop at each page's end: the lower figure).
#include <benchmark/benchmark.h>
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
  const bool huge = state.range(1) != 0;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(huge ? size_t(2) << 20 : 64, kBytes));
  if (huge) ::madvise(buf, kBytes, MADV_HUGEPAGE);
  std::memset(buf, 1, kBytes);  // touch every page before timing
  const size_t slice = kBytes / size_t(n_threads) / 128 * 128;
  std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
  for (auto _ : state) {
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; ++t) {
      threads.emplace_back(
          [&, t] { sums[size_t(t)] = read_probe_sum(buf + size_t(t) * slice, slice); });
    }
    for (std::thread& th : threads) th.join();
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(slice) * n_threads);
  std::free(buf);
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace omnibus
