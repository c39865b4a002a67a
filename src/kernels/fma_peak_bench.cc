// F32 FMA peak probe: how many f32 multiply-adds per second one core issues
// when nothing but FMAs runs, the ceiling of the unquantized (F32 / F16 /
// BF16) matmuls at many tokens, e.g. an F16 embedding model's prompts.
// docs/embeddings.md states the encoder's G MAC/s against this figure.
//
//   kernels_microbench --benchmark_filter=FmaPeak
//
// vfmadd231ps in 14 independent chains (more than latency x throughput, so
// the ports bound it), in assembly so that nothing is folded or spilled:
//   avx512: zmm (16 MAC each);  avx2: ymm (8 MAC each).
// A tier the CPU lacks is skipped.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "kernels/cpu_features.h"

namespace omnibus {
namespace {

constexpr int kChains = 14;
constexpr int64_t kIters = 1 << 16;

__attribute__((target("avx512f"))) int64_t run_avx512() {
  int64_t n = kIters;
  asm volatile(
      "vxorps %%zmm0, %%zmm0, %%zmm0\n"
      "vxorps %%zmm1, %%zmm1, %%zmm1\n"
      "vxorps %%zmm2, %%zmm2, %%zmm2\n"
      "vxorps %%zmm3, %%zmm3, %%zmm3\n"
      "vxorps %%zmm4, %%zmm4, %%zmm4\n"
      "vxorps %%zmm5, %%zmm5, %%zmm5\n"
      "vxorps %%zmm6, %%zmm6, %%zmm6\n"
      "vxorps %%zmm7, %%zmm7, %%zmm7\n"
      "vxorps %%zmm8, %%zmm8, %%zmm8\n"
      "vxorps %%zmm9, %%zmm9, %%zmm9\n"
      "vxorps %%zmm10, %%zmm10, %%zmm10\n"
      "vxorps %%zmm11, %%zmm11, %%zmm11\n"
      "vxorps %%zmm12, %%zmm12, %%zmm12\n"
      "vxorps %%zmm13, %%zmm13, %%zmm13\n"
      "vxorps %%zmm14, %%zmm14, %%zmm14\n"
      "vxorps %%zmm15, %%zmm15, %%zmm15\n"
      "1:\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm0\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm1\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm2\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm3\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm4\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm5\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm6\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm7\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm8\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm9\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm10\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm11\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm12\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm13\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return n;
}

__attribute__((target("avx2,fma"))) int64_t run_avx2() {
  int64_t n = kIters;
  asm volatile(
      "vxorps %%ymm0, %%ymm0, %%ymm0\n"
      "vxorps %%ymm1, %%ymm1, %%ymm1\n"
      "vxorps %%ymm2, %%ymm2, %%ymm2\n"
      "vxorps %%ymm3, %%ymm3, %%ymm3\n"
      "vxorps %%ymm4, %%ymm4, %%ymm4\n"
      "vxorps %%ymm5, %%ymm5, %%ymm5\n"
      "vxorps %%ymm6, %%ymm6, %%ymm6\n"
      "vxorps %%ymm7, %%ymm7, %%ymm7\n"
      "vxorps %%ymm8, %%ymm8, %%ymm8\n"
      "vxorps %%ymm9, %%ymm9, %%ymm9\n"
      "vxorps %%ymm10, %%ymm10, %%ymm10\n"
      "vxorps %%ymm11, %%ymm11, %%ymm11\n"
      "vxorps %%ymm12, %%ymm12, %%ymm12\n"
      "vxorps %%ymm13, %%ymm13, %%ymm13\n"
      "vxorps %%ymm14, %%ymm14, %%ymm14\n"
      "vxorps %%ymm15, %%ymm15, %%ymm15\n"
      "1:\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm1\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm3\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm5\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm7\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm9\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm11\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm12\n"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm13\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return n;
}

void run_probe(benchmark::State& state, Isa need, int64_t (*run)(), int macs_per_fma) {
  if (!cpu_features().supports(need)) {
    state.SkipWithError("this CPU lacks the tier");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(run());
  const double macs = double(kIters) * kChains * macs_per_fma * double(state.iterations());
  state.counters["GMAC/s"] = benchmark::Counter(macs / 1e9, benchmark::Counter::kIsRate);
}

void BM_FmaPeak_avx512(benchmark::State& s) { run_probe(s, Isa::kAvx512, run_avx512, 16); }
void BM_FmaPeak_avx2(benchmark::State& s) { run_probe(s, Isa::kAvx2, run_avx2, 8); }
BENCHMARK(BM_FmaPeak_avx512);
BENCHMARK(BM_FmaPeak_avx2);

}  // namespace
}  // namespace omnibus
