// Compute peak probes: how many multiply-adds per second one core issues
// when nothing but them runs, the ceilings docs/performance.md and
// docs/embeddings.md state the matmuls' G MAC/s against.
//
//   kernels_microbench --benchmark_filter='Int8Peak|FmaPeak'
//
// Int8Peak, the quantized matmuls' ceiling at many tokens (prefill, large
// batches): each tier's instruction in 16 independent chains (more than
// latency x throughput, so the ports, not the dependencies, bound it):
//   avx512:     vpdpbusd zmm (64 MAC each)
//   avx512_ymm: vpdpbusd ymm (32 MAC; what the 256-bit kernels issue there)
//   avx2:       vpmaddubsw + vpmaddwd + vpaddd ymm (32 MAC per triple)
//   avx2_i16:   the avx2 tier's K-quant step: 8 vpmaddubsw + 7 vpaddw + one
//               vpmaddwd + vpaddd per 256 MAC (run_avx2_i16 says why)
// FmaPeak, the unquantized (F32 / F16 / BF16) matmuls' ceiling, e.g. an F16
// embedding model's prompts: vfmadd231ps in 14 chains, zmm (16 MAC) at
// avx512, ymm (8 MAC) at avx2.
// All in assembly, so that nothing is folded or spilled. A tier the CPU
// lacks is skipped.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu_features.h"

namespace omnibus {
namespace {

constexpr int kChains = 16;
constexpr int kFmaChains = 14;
constexpr int64_t kIters = 1 << 16;

// The loops are written in assembly: a compiler keeping 16 accumulators in
// an array moved them through the stack, and measured that instead.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t run_avx512() {
  int64_t n = kIters;
  asm volatile(
      "vpternlogd $0xff, %%zmm16, %%zmm16, %%zmm16\n"
      "vpternlogd $0xff, %%zmm17, %%zmm17, %%zmm17\n"
      "vpxord %%zmm0, %%zmm0, %%zmm0\n"
      "vpxord %%zmm1, %%zmm1, %%zmm1\n"
      "vpxord %%zmm2, %%zmm2, %%zmm2\n"
      "vpxord %%zmm3, %%zmm3, %%zmm3\n"
      "vpxord %%zmm4, %%zmm4, %%zmm4\n"
      "vpxord %%zmm5, %%zmm5, %%zmm5\n"
      "vpxord %%zmm6, %%zmm6, %%zmm6\n"
      "vpxord %%zmm7, %%zmm7, %%zmm7\n"
      "vpxord %%zmm8, %%zmm8, %%zmm8\n"
      "vpxord %%zmm9, %%zmm9, %%zmm9\n"
      "vpxord %%zmm10, %%zmm10, %%zmm10\n"
      "vpxord %%zmm11, %%zmm11, %%zmm11\n"
      "vpxord %%zmm12, %%zmm12, %%zmm12\n"
      "vpxord %%zmm13, %%zmm13, %%zmm13\n"
      "vpxord %%zmm14, %%zmm14, %%zmm14\n"
      "vpxord %%zmm15, %%zmm15, %%zmm15\n"
      "1:\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm0\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm1\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm2\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm3\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm4\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm5\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm6\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm7\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm8\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm9\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm10\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm11\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm12\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm13\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm14\n"
      "vpdpbusd %%zmm16, %%zmm17, %%zmm15\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "cc");
  return n;
}

__attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni"))) int64_t run_avx512_ymm() {
  int64_t n = kIters;
  asm volatile(
      "vpternlogd $0xff, %%ymm16, %%ymm16, %%ymm16\n"
      "vpternlogd $0xff, %%ymm17, %%ymm17, %%ymm17\n"
      "vpxord %%ymm0, %%ymm0, %%ymm0\n"
      "vpxord %%ymm1, %%ymm1, %%ymm1\n"
      "vpxord %%ymm2, %%ymm2, %%ymm2\n"
      "vpxord %%ymm3, %%ymm3, %%ymm3\n"
      "vpxord %%ymm4, %%ymm4, %%ymm4\n"
      "vpxord %%ymm5, %%ymm5, %%ymm5\n"
      "vpxord %%ymm6, %%ymm6, %%ymm6\n"
      "vpxord %%ymm7, %%ymm7, %%ymm7\n"
      "vpxord %%ymm8, %%ymm8, %%ymm8\n"
      "vpxord %%ymm9, %%ymm9, %%ymm9\n"
      "vpxord %%ymm10, %%ymm10, %%ymm10\n"
      "vpxord %%ymm11, %%ymm11, %%ymm11\n"
      "vpxord %%ymm12, %%ymm12, %%ymm12\n"
      "vpxord %%ymm13, %%ymm13, %%ymm13\n"
      "vpxord %%ymm14, %%ymm14, %%ymm14\n"
      "vpxord %%ymm15, %%ymm15, %%ymm15\n"
      "1:\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm0\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm1\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm2\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm3\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm4\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm5\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm6\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm7\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm8\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm9\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm10\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm11\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm12\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm13\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm14\n"
      "vpdpbusd %%ymm16, %%ymm17, %%ymm15\n"
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "cc");
  return n;
}

// The avx2 probes' operands: u = ymm12 (all ones), s = ymm13 (1 per byte),
// ones = ymm14 (1 per int16), int32 sums ymm0-3 zeroed.
#define OMNIBUS_AVX2_SETUP               \
  "vpcmpeqb %%ymm12, %%ymm12, %%ymm12\n" \
  "vpabsb %%ymm12, %%ymm13\n"            \
  "vpabsw %%ymm12, %%ymm14\n"            \
  "vpxor %%ymm0, %%ymm0, %%ymm0\n"       \
  "vpxor %%ymm1, %%ymm1, %%ymm1\n"       \
  "vpxor %%ymm2, %%ymm2, %%ymm2\n"       \
  "vpxor %%ymm3, %%ymm3, %%ymm3\n"

// One triple on each of the 4 chains (temporaries ymm4-7 into sums ymm0-3).
#define OMNIBUS_AVX2_TRIPLES              \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm4\n" \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm5\n" \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm6\n" \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm7\n" \
  "vpmaddwd %%ymm14, %%ymm4, %%ymm4\n"    \
  "vpmaddwd %%ymm14, %%ymm5, %%ymm5\n"    \
  "vpmaddwd %%ymm14, %%ymm6, %%ymm6\n"    \
  "vpmaddwd %%ymm14, %%ymm7, %%ymm7\n"    \
  "vpaddd %%ymm4, %%ymm0, %%ymm0\n"       \
  "vpaddd %%ymm5, %%ymm1, %%ymm1\n"       \
  "vpaddd %%ymm6, %%ymm2, %%ymm2\n"       \
  "vpaddd %%ymm7, %%ymm3, %%ymm3\n"

// avx2: 4 chains of maddubs -> madd -> add (12 registers: 4 sums, 8
// temporaries; u, s, ones in ymm12-14).
__attribute__((target("avx2"))) int64_t run_avx2() {
  int64_t n = 2 * kIters;
  asm volatile(OMNIBUS_AVX2_SETUP
               "vpxor %%ymm4, %%ymm4, %%ymm4\n"
               "vpxor %%ymm5, %%ymm5, %%ymm5\n"
               "vpxor %%ymm6, %%ymm6, %%ymm6\n"
               "vpxor %%ymm7, %%ymm7, %%ymm7\n"
               "1:\n" OMNIBUS_AVX2_TRIPLES OMNIBUS_AVX2_TRIPLES
               "dec %0\n"
               "jnz 1b\n"
               : "+r"(n)
               :
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                 "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc");
  return n;
}

// avx2_i16: the avx2 tier's own K-quant step (kernels' step_add, then
// sum_scaled): per 32-element sub-block and chain, 8 vpmaddubsw summed in
// int16 by 7 vpaddw, then one vpmaddwd by the scale and one vpaddd; 4 chains
// (int16 sums ymm4-7, temporaries ymm8-11, int32 sums ymm0-3). 32 MAC per
// vpmaddubsw, a fifth fewer multiply-port ops than the triple above: the
// ceiling of the avx2 tier's prompt kernels, where Int8Peak_avx2 is that of
// a kernel with a vpmaddwd per vpmaddubsw.
#define OMNIBUS_I16_STEP0(c) "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #c "\n"
#define OMNIBUS_I16_STEP(s, t)            \
  "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #t \
  "\n"                                    \
  "vpaddw %%ymm" #t ", %%ymm" #s ", %%ymm" #s "\n"
#define OMNIBUS_I16_STEPS \
  OMNIBUS_I16_STEP(4, 8) OMNIBUS_I16_STEP(5, 9) OMNIBUS_I16_STEP(6, 10) OMNIBUS_I16_STEP(7, 11)
#define OMNIBUS_I16_END(s, c)               \
  "vpmaddwd %%ymm14, %%ymm" #s ", %%ymm" #s \
  "\n"                                      \
  "vpaddd %%ymm" #s ", %%ymm" #c ", %%ymm" #c "\n"
__attribute__((target("avx2"))) int64_t run_avx2_i16() {
  int64_t n = kIters;
  asm volatile(
      OMNIBUS_AVX2_SETUP
      "1:\n" OMNIBUS_I16_STEP0(4) OMNIBUS_I16_STEP0(5) OMNIBUS_I16_STEP0(6) OMNIBUS_I16_STEP0(7)
      OMNIBUS_I16_STEPS OMNIBUS_I16_STEPS OMNIBUS_I16_STEPS OMNIBUS_I16_STEPS OMNIBUS_I16_STEPS
      OMNIBUS_I16_STEPS OMNIBUS_I16_STEPS
      OMNIBUS_I16_END(4, 0) OMNIBUS_I16_END(5, 1) OMNIBUS_I16_END(6, 2) OMNIBUS_I16_END(7, 3)
      "dec %0\n"
      "jnz 1b\n"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "cc");
  return n;
}
#undef OMNIBUS_I16_END
#undef OMNIBUS_I16_STEPS
#undef OMNIBUS_I16_STEP
#undef OMNIBUS_I16_STEP0
#undef OMNIBUS_AVX2_SETUP
#undef OMNIBUS_AVX2_TRIPLES

// vfmadd231ps in kFmaChains chains: accumulators R0..R13 zeroed, sources R14
// and R15 (R: "zmm" or "ymm").
#define OMNIBUS_FMA(R, i) "vfmadd231ps %%" R "14, %%" R "15, %%" R #i "\n"
#define OMNIBUS_FMA_ZERO(R, i) "vxorps %%" R #i ", %%" R #i ", %%" R #i "\n"
#define OMNIBUS_FMA_LOOP(R) \
  OMNIBUS_FMA_ZERO(R, 0) OMNIBUS_FMA_ZERO(R, 1) OMNIBUS_FMA_ZERO(R, 2) OMNIBUS_FMA_ZERO(R, 3)   \
  OMNIBUS_FMA_ZERO(R, 4) OMNIBUS_FMA_ZERO(R, 5) OMNIBUS_FMA_ZERO(R, 6) OMNIBUS_FMA_ZERO(R, 7)   \
  OMNIBUS_FMA_ZERO(R, 8) OMNIBUS_FMA_ZERO(R, 9) OMNIBUS_FMA_ZERO(R, 10)                         \
  OMNIBUS_FMA_ZERO(R, 11) OMNIBUS_FMA_ZERO(R, 12) OMNIBUS_FMA_ZERO(R, 13)                       \
  OMNIBUS_FMA_ZERO(R, 14) OMNIBUS_FMA_ZERO(R, 15) "1:\n" OMNIBUS_FMA(R, 0) OMNIBUS_FMA(R, 1)    \
  OMNIBUS_FMA(R, 2) OMNIBUS_FMA(R, 3) OMNIBUS_FMA(R, 4) OMNIBUS_FMA(R, 5) OMNIBUS_FMA(R, 6)     \
  OMNIBUS_FMA(R, 7) OMNIBUS_FMA(R, 8) OMNIBUS_FMA(R, 9) OMNIBUS_FMA(R, 10) OMNIBUS_FMA(R, 11)   \
  OMNIBUS_FMA(R, 12) OMNIBUS_FMA(R, 13) "dec %0\n"                                               \
  "jnz 1b\n"
#define OMNIBUS_FMA_CLOBBERS                                                               \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc"

__attribute__((target("avx512f"))) int64_t run_fma_avx512() {
  int64_t n = kIters;
  asm volatile(OMNIBUS_FMA_LOOP("zmm") : "+r"(n) : : OMNIBUS_FMA_CLOBBERS);
  return n;
}

__attribute__((target("avx2,fma"))) int64_t run_fma_avx2() {
  int64_t n = kIters;
  asm volatile(OMNIBUS_FMA_LOOP("ymm") : "+r"(n) : : OMNIBUS_FMA_CLOBBERS);
  return n;
}
#undef OMNIBUS_FMA_CLOBBERS
#undef OMNIBUS_FMA_LOOP
#undef OMNIBUS_FMA_ZERO
#undef OMNIBUS_FMA

// MACs per call of each runner.
constexpr double kMacs512 = double(kIters) * kChains * 64;
constexpr double kMacs256 = double(kIters) * kChains * 32;  // avx2: 2 x kIters x 8 triples
constexpr double kMacsI16 = double(kIters) * 4 * 8 * 32;    // avx2_i16: 4 chains x 8 maddubs
constexpr double kFmaMacs512 = double(kIters) * kFmaChains * 16;
constexpr double kFmaMacs256 = double(kIters) * kFmaChains * 8;

void run_probe(benchmark::State& state, Isa need, int64_t (*run)(), double macs) {
  if (!cpu_features().supports(need)) {
    state.SkipWithError("this CPU lacks the tier");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(run());
  state.counters["GMAC/s"] =
      benchmark::Counter(macs * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_Int8Peak_avx512(benchmark::State& s) { run_probe(s, Isa::kAvx512, run_avx512, kMacs512); }
void BM_Int8Peak_avx512_ymm(benchmark::State& s) {
  run_probe(s, Isa::kAvx512, run_avx512_ymm, kMacs256);
}
void BM_Int8Peak_avx2(benchmark::State& s) { run_probe(s, Isa::kAvx2, run_avx2, kMacs256); }
BENCHMARK(BM_Int8Peak_avx512);
BENCHMARK(BM_Int8Peak_avx512_ymm);
BENCHMARK(BM_Int8Peak_avx2);
void BM_Int8Peak_avx2_i16(benchmark::State& s) { run_probe(s, Isa::kAvx2, run_avx2_i16, kMacsI16); }
BENCHMARK(BM_Int8Peak_avx2_i16);
void BM_FmaPeak_avx512(benchmark::State& s) {
  run_probe(s, Isa::kAvx512, run_fma_avx512, kFmaMacs512);
}
void BM_FmaPeak_avx2(benchmark::State& s) { run_probe(s, Isa::kAvx2, run_fma_avx2, kFmaMacs256); }
BENCHMARK(BM_FmaPeak_avx512);
BENCHMARK(BM_FmaPeak_avx2);

}  // namespace
}  // namespace omnibus
