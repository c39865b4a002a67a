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

#include <cstdint>

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
// none) into L2 (hint 1, prefetcht1) or L1 (hint 0, prefetcht0), on huge
// pages (read_probe_sum_prefetching). Arguments: threads, ahead, hint.
void BM_ReadPrefetchSweep(benchmark::State& state) {
  if (!cpu_features().supports(Isa::kAvx2)) {
    state.SkipWithError("needs AVX2");
    return;
  }
  const int n_threads = int(state.range(0));
  const ReadProbe probe(kBytes, true);
  for (auto _ : state)
    probe.read_pass_prefetching(n_threads, size_t(state.range(1)), state.range(2) != 0);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(probe.pass_bytes(n_threads)));
}
BENCHMARK(BM_ReadPrefetchSweep)
    ->ArgsProduct({{2}, {0, 256, 512, 1024, 2048, 3072, 4096, 8192, 16384}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace omnibus
