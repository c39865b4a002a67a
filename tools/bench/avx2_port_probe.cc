// avx2_port_probe: how the avx2 tier's int8 step shares the core's vector
// pipes (docs/performance.md, round (w)). A diagnostic, not part of the
// build; needs AVX2:
//   g++ -O2 -mavx2 -o /tmp/avx2_port_probe tools/bench/avx2_port_probe.cc
//   /tmp/avx2_port_probe [GHz]
// Times loops of 8 independent operations of each kind, and mixes of them,
// in assembly (no compiler scheduling), single thread, and prints ns and
// cycles an iteration at GHz (default 3.08: what FmaPeak_avx2's 49.2 G MAC/s
// implies on the Zen 3 of round (w); pass the CPU's own). On that Zen 3: 8
// vpmaddubsw 3.8 cycles (2 a cycle), 8 vpaddw 1.9 (4 a cycle), 8
// vpbroadcastd from memory 3.8 (2 a cycle, load ports only: beside 8 vpaddw
// still 3.8), 8 vpmaddubsw + 8 vpaddw 4.8-5.0 (the adds share the multiply
// pipes), 5.0 with the avx2 pair kernels' 4 broadcasts per 8 vpmaddubsw;
// 8 vpmaddwd 3.8 (the same two pipes as vpmaddubsw); 256 products of Q8_0's
// step (vpsignb, vpmaddubsw, vpmaddwd, vpaddd per 32) 9.6 cycles, and from
// int16 quants (vpmaddwd, vpaddd per 16) 9.5 (round (x)).
// Run on a quiet machine: each mix's best of 5 runs, after a warm-up.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

alignas(64) int8_t g_buf[4096];
constexpr int64_t kIters = int64_t(1) << 22;

#define OMNIBUS_MB(t) "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #t "\n"
#define OMNIBUS_AD(t, s) "vpaddw %%ymm" #t ", %%ymm" #s ", %%ymm" #s "\n"
#define OMNIBUS_BC(r, o) "vpbroadcastd " #o "(%1), %%ymm" #r "\n"
#define OMNIBUS_MW(t) "vpmaddwd %%ymm12, %%ymm13, %%ymm" #t "\n"
#define OMNIBUS_ADD(t, s) "vpaddd %%ymm" #t ", %%ymm" #s ", %%ymm" #s "\n"
// avx2 Q8_0's step for 32 products: a's sign from w, vpmaddubsw, widen, add
#define OMNIBUS_Q8(t, s)                                                              \
  "vpsignb %%ymm12, %%ymm13, %%ymm" #t "\n vpmaddubsw %%ymm" #t ", %%ymm14, %%ymm" #t \
  "\n vpmaddwd %%ymm15, %%ymm" #t ", %%ymm" #t "\n" OMNIBUS_ADD(t, s)
// 16 products from int16 quants: vpmaddwd, add
#define OMNIBUS_W16(t, s) OMNIBUS_MW(t) OMNIBUS_ADD(t, s)
#define OMNIBUS_CLOBBERS                                                                   \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc"
// kIters iterations of `body` (n: the counter, p: g_buf for the broadcasts).
#define OMNIBUS_LOOP(body) \
  asm volatile("1:\n" body "dec %0\njnz 1b\n" : "+r"(n) : "r"(p) : OMNIBUS_CLOBBERS)
// 4 int16 steps (64 products), temporaries ymm0-3 into sums a, b, c, d
#define OMNIBUS_W16_4(a, b, c, d) \
  OMNIBUS_W16(0, a) OMNIBUS_W16(1, b) OMNIBUS_W16(2, c) OMNIBUS_W16(3, d)

// Seconds for kIters iterations of mix `v`.
__attribute__((target("avx2"))) double run(int v) {
  int64_t n = kIters;
  const int8_t* p = g_buf;
  const auto t0 = std::chrono::steady_clock::now();
  switch (v) {
    case 0:  // 8 vpmaddubsw, each summed into its own int16 accumulator
      OMNIBUS_LOOP(OMNIBUS_MB(8) OMNIBUS_AD(8, 0) OMNIBUS_MB(9) OMNIBUS_AD(9, 1) OMNIBUS_MB(10)
                       OMNIBUS_AD(10, 2) OMNIBUS_MB(11) OMNIBUS_AD(11, 3) OMNIBUS_MB(8)
                           OMNIBUS_AD(8, 4) OMNIBUS_MB(9) OMNIBUS_AD(9, 5) OMNIBUS_MB(10)
                               OMNIBUS_AD(10, 6) OMNIBUS_MB(11) OMNIBUS_AD(11, 7));
      break;
    case 1:  // the same with 4 activation broadcasts (the avx2 pair kernels' ratio)
      OMNIBUS_LOOP(OMNIBUS_BC(14, 0) OMNIBUS_MB(8) OMNIBUS_AD(8, 0) OMNIBUS_MB(9) OMNIBUS_AD(9, 1)
                       OMNIBUS_BC(15, 4) OMNIBUS_MB(10) OMNIBUS_AD(10, 2) OMNIBUS_MB(11)
                           OMNIBUS_AD(11, 3) OMNIBUS_BC(14, 8) OMNIBUS_MB(8) OMNIBUS_AD(8, 4)
                               OMNIBUS_MB(9) OMNIBUS_AD(9, 5) OMNIBUS_BC(15, 12) OMNIBUS_MB(10)
                                   OMNIBUS_AD(10, 6) OMNIBUS_MB(11) OMNIBUS_AD(11, 7));
      break;
    case 2:  // 8 vpmaddubsw alone
      OMNIBUS_LOOP(OMNIBUS_MB(0) OMNIBUS_MB(1) OMNIBUS_MB(2) OMNIBUS_MB(3) OMNIBUS_MB(4)
                       OMNIBUS_MB(5) OMNIBUS_MB(6) OMNIBUS_MB(7));
      break;
    case 3:  // 8 vpaddw alone
      OMNIBUS_LOOP(OMNIBUS_AD(8, 0) OMNIBUS_AD(9, 1) OMNIBUS_AD(10, 2) OMNIBUS_AD(11, 3)
                       OMNIBUS_AD(8, 4) OMNIBUS_AD(9, 5) OMNIBUS_AD(10, 6) OMNIBUS_AD(11, 7));
      break;
    case 4:  // 8 vpbroadcastd from memory alone
      OMNIBUS_LOOP(OMNIBUS_BC(0, 0) OMNIBUS_BC(1, 4) OMNIBUS_BC(2, 8) OMNIBUS_BC(3, 12)
                       OMNIBUS_BC(4, 16) OMNIBUS_BC(5, 20) OMNIBUS_BC(6, 24) OMNIBUS_BC(7, 28));
      break;
    case 5:  // 8 vpaddw beside 8 broadcasts
      OMNIBUS_LOOP(OMNIBUS_BC(12, 0) OMNIBUS_AD(8, 0) OMNIBUS_BC(13, 4) OMNIBUS_AD(9, 1) OMNIBUS_BC(
          14, 8) OMNIBUS_AD(10, 2) OMNIBUS_BC(15, 12) OMNIBUS_AD(11, 3) OMNIBUS_BC(12, 16)
                       OMNIBUS_AD(8, 4) OMNIBUS_BC(13, 20) OMNIBUS_AD(9, 5) OMNIBUS_BC(14, 24)
                           OMNIBUS_AD(10, 6) OMNIBUS_BC(15, 28) OMNIBUS_AD(11, 7));
      break;
    case 6:  // 8 vpmaddwd alone
      OMNIBUS_LOOP(OMNIBUS_MW(0) OMNIBUS_MW(1) OMNIBUS_MW(2) OMNIBUS_MW(3) OMNIBUS_MW(4)
                       OMNIBUS_MW(5) OMNIBUS_MW(6) OMNIBUS_MW(7));
      break;
    case 7:  // 8 vpmaddubsw + 4 vpmaddwd
      OMNIBUS_LOOP(OMNIBUS_MB(0) OMNIBUS_MB(1) OMNIBUS_MB(2) OMNIBUS_MB(3) OMNIBUS_MB(4) OMNIBUS_MB(
          5) OMNIBUS_MB(6) OMNIBUS_MB(7) OMNIBUS_MW(8) OMNIBUS_MW(9) OMNIBUS_MW(10) OMNIBUS_MW(11));
      break;
    case 8:  // 8 of Q8_0's steps (256 products)
      OMNIBUS_LOOP(OMNIBUS_Q8(0, 4) OMNIBUS_Q8(1, 5) OMNIBUS_Q8(2, 6) OMNIBUS_Q8(3, 7)
                       OMNIBUS_Q8(0, 8) OMNIBUS_Q8(1, 9) OMNIBUS_Q8(2, 10) OMNIBUS_Q8(3, 11));
      break;
    case 9:  // the same 256 products from int16 quants: 16 vpmaddwd + vpaddd
      OMNIBUS_LOOP(OMNIBUS_W16_4(4, 5, 6, 7) OMNIBUS_W16_4(8, 9, 10, 11) OMNIBUS_W16_4(4, 5, 6, 7)
                       OMNIBUS_W16_4(8, 9, 10, 11));
      break;
    default:
      return 0.0;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::atof(argv[1]) : 3.08;
  const char* names[] = {"8 vpmaddubsw + 8 vpaddw",
                         "the same + 4 vpbroadcastd",
                         "8 vpmaddubsw",
                         "8 vpaddw",
                         "8 vpbroadcastd (memory)",
                         "8 vpaddw + 8 vpbroadcastd",
                         "8 vpmaddwd",
                         "8 vpmaddubsw + 4 vpmaddwd",
                         "Q8_0 x8: 256 products",
                         "int16 x16: 256 products"};
  constexpr int kMixes = int(sizeof(names) / sizeof(names[0]));
  for (int v = 0; v < kMixes; ++v) run(v);  // warm up (the clock ramps)
  for (int v = 0; v < kMixes; ++v) {
    double best = run(v);
    for (int r = 1; r < 5; ++r) best = std::min(best, run(v));
    const double ns = best / double(kIters) * 1e9;
    std::printf("%-28s %6.3f ns  %5.2f cycles at %.2f GHz\n", names[v], ns, ns * ghz, ghz);
  }
  return 0;
}
