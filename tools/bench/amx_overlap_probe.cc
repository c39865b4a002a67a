// amx_overlap_probe: does the core run AMX tile products and vector work at
// the same time? (docs/performance.md, round (h)). A diagnostic, not part of
// the build; needs a CPU with AMX-INT8 (Sapphire Rapids and later). Built with
// the amx tier's flags (CMakeLists.txt):
//   g++ -O2 -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq
//     -mavx512vnni -mamx-tile -mamx-int8 -Wno-maybe-uninitialized
//     -o /tmp/amx_overlap_probe tools/bench/amx_overlap_probe.cc   (one line)
//   /tmp/amx_overlap_probe
// Part 1 times a loop of 2 tile products (tdpbsud, 16 x 16 x 64) with and
// without a fixed block of other work between them, per kind of work: where
// "with tiles" is near the larger of the two alone, they overlap; where it is
// their sum, they do not. Part 2 does the same with the amx kernels' own
// pattern (kernels/matmul_packed_kquants_amx.cc): a unit's 16 tile products
// with their tile loads, and the Q4_K float step of the previous unit's 32
// rows (all data in L1), and that float step on ymm registers. Timings in
// ns; single thread. On a Sapphire Rapids Xeon (docs/performance.md, round
// (u)): the 512-bit multiplies (FMA, vmulps, vcvtdq2ps, vpdpwssd) make no
// progress while a tile product runs, shifts, adds and loads do; the ymm
// float step does not hide under the tile products either.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace {

struct alignas(64) TileConfig {
  uint8_t palette_id = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

alignas(64) int8_t act[4][2][16][64];
alignas(64) uint8_t wts[4][2][16][64];
alignas(64) int32_t sums[2][2][2][16][16];
alignas(64) float acc[32][16], mins[32][16], da[32];
alignas(64) int16_t bsum[32][8];

// ---- part 1: 2 tile products a loop, and a block of one kind of work
#define IMUL8                                                                                \
  "imul %%r8,%%r8\n imul %%r9,%%r9\n imul %%r10,%%r10\n imul %%r11,%%r11\n imul %%r8,%%r8\n" \
  " imul %%r9,%%r9\n imul %%r10,%%r10\n imul %%r11,%%r11\n"
#define ZFMA8                                                                \
  "vfmadd231ps %%zmm1,%%zmm2,%%zmm10\n vfmadd231ps %%zmm1,%%zmm2,%%zmm11\n"  \
  " vfmadd231ps %%zmm1,%%zmm2,%%zmm12\n vfmadd231ps %%zmm1,%%zmm2,%%zmm13\n" \
  " vfmadd231ps %%zmm1,%%zmm2,%%zmm14\n vfmadd231ps %%zmm1,%%zmm2,%%zmm15\n" \
  " vfmadd231ps %%zmm1,%%zmm2,%%zmm16\n vfmadd231ps %%zmm1,%%zmm2,%%zmm17\n"
#define YFMA8                                                                \
  "vfmadd231ps %%ymm1,%%ymm2,%%ymm10\n vfmadd231ps %%ymm1,%%ymm2,%%ymm11\n"  \
  " vfmadd231ps %%ymm1,%%ymm2,%%ymm12\n vfmadd231ps %%ymm1,%%ymm2,%%ymm13\n" \
  " vfmadd231ps %%ymm1,%%ymm2,%%ymm14\n vfmadd231ps %%ymm1,%%ymm2,%%ymm15\n" \
  " vfmadd231ps %%ymm1,%%ymm2,%%ymm6\n vfmadd231ps %%ymm1,%%ymm2,%%ymm7\n"
#define ZADD8                                                        \
  "vpaddd %%zmm1,%%zmm10,%%zmm10\n vpaddd %%zmm1,%%zmm11,%%zmm11\n"  \
  " vpaddd %%zmm1,%%zmm12,%%zmm12\n vpaddd %%zmm1,%%zmm13,%%zmm13\n" \
  " vpaddd %%zmm1,%%zmm14,%%zmm14\n vpaddd %%zmm1,%%zmm15,%%zmm15\n" \
  " vpaddd %%zmm1,%%zmm16,%%zmm16\n vpaddd %%zmm1,%%zmm17,%%zmm17\n"
#define ZLD8                                                                       \
  "vmovaps (%0),%%zmm10\n vmovaps 64(%0),%%zmm11\n vmovaps 128(%0),%%zmm12\n"      \
  " vmovaps 192(%0),%%zmm13\n vmovaps 256(%0),%%zmm14\n vmovaps 320(%0),%%zmm15\n" \
  " vmovaps 384(%0),%%zmm16\n vmovaps 448(%0),%%zmm17\n"
#define ZDP8                                                           \
  "vpdpwssd %%zmm1,%%zmm2,%%zmm10\n vpdpwssd %%zmm1,%%zmm2,%%zmm11\n"  \
  " vpdpwssd %%zmm1,%%zmm2,%%zmm12\n vpdpwssd %%zmm1,%%zmm2,%%zmm13\n" \
  " vpdpwssd %%zmm1,%%zmm2,%%zmm14\n vpdpwssd %%zmm1,%%zmm2,%%zmm15\n" \
  " vpdpwssd %%zmm1,%%zmm2,%%zmm16\n vpdpwssd %%zmm1,%%zmm2,%%zmm17\n"
#define ZCVT8                                              \
  "vcvtdq2ps %%zmm1,%%zmm10\n vcvtdq2ps %%zmm2,%%zmm11\n"  \
  " vcvtdq2ps %%zmm1,%%zmm12\n vcvtdq2ps %%zmm2,%%zmm13\n" \
  " vcvtdq2ps %%zmm1,%%zmm14\n vcvtdq2ps %%zmm2,%%zmm15\n" \
  " vcvtdq2ps %%zmm1,%%zmm16\n vcvtdq2ps %%zmm2,%%zmm17\n"
#define ZMUL8                                                      \
  "vmulps %%zmm1,%%zmm2,%%zmm10\n vmulps %%zmm1,%%zmm2,%%zmm11\n"  \
  " vmulps %%zmm1,%%zmm2,%%zmm12\n vmulps %%zmm1,%%zmm2,%%zmm13\n" \
  " vmulps %%zmm1,%%zmm2,%%zmm14\n vmulps %%zmm1,%%zmm2,%%zmm15\n" \
  " vmulps %%zmm1,%%zmm2,%%zmm16\n vmulps %%zmm1,%%zmm2,%%zmm17\n"
#define ZSHL8                                              \
  "vpslld $3,%%zmm1,%%zmm10\n vpslld $3,%%zmm2,%%zmm11\n"  \
  " vpslld $3,%%zmm1,%%zmm12\n vpslld $3,%%zmm2,%%zmm13\n" \
  " vpslld $3,%%zmm1,%%zmm14\n vpslld $3,%%zmm2,%%zmm15\n" \
  " vpslld $3,%%zmm1,%%zmm16\n vpslld $3,%%zmm2,%%zmm17\n"
#define ZBC8                                                                                   \
  "vpbroadcastd (%0),%%zmm10\n vpbroadcastd 4(%0),%%zmm11\n vpbroadcastd 8(%0),%%zmm12\n"      \
  " vpbroadcastd 12(%0),%%zmm13\n vpbroadcastd 16(%0),%%zmm14\n vpbroadcastd 20(%0),%%zmm15\n" \
  " vpbroadcastd 24(%0),%%zmm16\n vpbroadcastd 28(%0),%%zmm17\n"
#define CLOBBER \
  "xmm6", "xmm7", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17"

template <int kWork>
inline void work() {
  if constexpr (kWork == 0) asm volatile(IMUL8 IMUL8 ::: "r8", "r9", "r10", "r11");
  if constexpr (kWork == 1) asm volatile(ZFMA8 ZFMA8 ZFMA8 ZFMA8 ::: CLOBBER);
  if constexpr (kWork == 2)
    asm volatile(YFMA8 YFMA8 YFMA8 YFMA8 YFMA8 YFMA8 YFMA8 YFMA8 ::: CLOBBER);
  if constexpr (kWork == 3)
    asm volatile(ZADD8 ZADD8 ZADD8 ZADD8 ZADD8 ZADD8 ZADD8 ZADD8 ::: CLOBBER);
  if constexpr (kWork == 5) asm volatile(ZDP8 ZDP8 ZDP8 ZDP8 ::: CLOBBER);
  if constexpr (kWork == 6) asm volatile(ZCVT8 ZCVT8 ZCVT8 ZCVT8 ::: CLOBBER);
  if constexpr (kWork == 7) asm volatile(ZMUL8 ZMUL8 ZMUL8 ZMUL8 ::: CLOBBER);
  if constexpr (kWork == 8) asm volatile(ZSHL8 ZSHL8 ZSHL8 ZSHL8 ::: CLOBBER);
  if constexpr (kWork == 9) asm volatile(ZBC8 ZBC8 ZBC8 ZBC8 ::"r"(&wts[0][0][0][0]) : CLOBBER);
  if constexpr (kWork == 4)
    asm volatile(ZLD8 ZLD8 ZLD8 ZLD8 ZLD8 ZLD8 ZLD8 ZLD8 ::"r"(&wts[0][0][0][0]) : CLOBBER);
}

template <int kWork, bool kTiles, bool kVector>
double part1() {
  constexpr long kIters = 4000000;
  const double t0 = now();
  for (long i = 0; i < kIters; ++i) {
    if (kTiles) _tile_dpbsud(0, 4, 6);
    if (kVector) work<kWork>();
    if (kTiles) _tile_dpbsud(1, 4, 7);
    if (kVector) work<kWork>();
  }
  return (now() - t0) / kIters * 1e9;
}

// ---- part 2: the kernels' unit of 32 tokens and the Q4_K float step
__attribute__((noinline)) void float_step(int which, int blk, int r0, int r1, const __m512i* mv,
                                          __m512 d, __m512 dm) {
  for (int r = r0; r < r1; ++r) {
    const __m512i isum =
        _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[which][blk][0][r]), 3),
                         _mm512_load_si512(sums[which][blk][1][r]));
    const int32_t* pairs = reinterpret_cast<const int32_t*>(bsum[blk * 16 + r]);
    __m512i m = _mm512_madd_epi16(mv[0], _mm512_set1_epi32(pairs[0]));
    for (int k = 1; k < 4; ++k) m = _mm512_dpwssd_epi32(m, mv[k], _mm512_set1_epi32(pairs[k]));
    const __m512 dv = _mm512_set1_ps(da[blk * 16 + r]);
    float* a = acc[blk * 16 + r];
    float* mn = mins[blk * 16 + r];
    _mm512_store_ps(
        a, _mm512_fmadd_ps(_mm512_mul_ps(d, dv), _mm512_cvtepi32_ps(isum), _mm512_load_ps(a)));
    _mm512_store_ps(
        mn, _mm512_fmadd_ps(_mm512_mul_ps(dm, dv), _mm512_cvtepi32_ps(m), _mm512_load_ps(mn)));
  }
}

// float_step on ymm, lane for lane: each half of the 16 outputs with its own
// operands (mins mv[4 h..], scales d_h, dm_h), as a kernel's halves would
// need, so its registers are the kernel's too (the values do not matter).
__attribute__((noinline)) void float_step_y(int which, int blk, int r0, int r1, const __m256i* mv,
                                            __m256 d0, __m256 d1, __m256 dm0, __m256 dm1) {
  for (int r = r0; r < r1; ++r) {
    const int32_t* pairs = reinterpret_cast<const int32_t*>(bsum[blk * 16 + r]);
    const __m256 dv = _mm256_set1_ps(da[blk * 16 + r]);
    float* a = acc[blk * 16 + r];
    float* mn = mins[blk * 16 + r];
    for (int h = 0; h < 2; ++h) {
      const __m256i isum = _mm256_add_epi32(
          _mm256_slli_epi32(
              _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[which][blk][0][r] + 8 * h)),
              3),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(sums[which][blk][1][r] + 8 * h)));
      __m256i m = _mm256_madd_epi16(mv[4 * h], _mm256_set1_epi32(pairs[0]));
      for (int k = 1; k < 4; ++k)
        m = _mm256_dpwssd_epi32(m, mv[4 * h + k], _mm256_set1_epi32(pairs[k]));
      _mm256_store_ps(a + 8 * h,
                      _mm256_fmadd_ps(_mm256_mul_ps(h ? d1 : d0, dv), _mm256_cvtepi32_ps(isum),
                                      _mm256_load_ps(a + 8 * h)));
      _mm256_store_ps(mn + 8 * h,
                      _mm256_fmadd_ps(_mm256_mul_ps(h ? dm1 : dm0, dv), _mm256_cvtepi32_ps(m),
                                      _mm256_load_ps(mn + 8 * h)));
    }
  }
}

inline void unit_step(int k) {
  _tile_loadd(6, wts[k][0], 64);
  _tile_loadd(7, wts[k][1], 64);
  _tile_loadd(4, act[k][0], 64);
  _tile_dpbsud(0, 4, 6);
  _tile_dpbsud(1, 4, 7);
  _tile_loadd(5, act[k][1], 64);
  _tile_dpbsud(2, 5, 6);
  _tile_dpbsud(3, 5, 7);
}

// kYmm: the same float step on ymm registers, 8 outputs a half (lane for
// lane the same operations).
template <bool kTiles, bool kFloat, bool kYmm = false>
double part2() {
  constexpr long kIters = 2000000;
  __m512i mv[4];
  __m256i mv_y[8];
  for (int k = 0; k < 4; ++k) mv[k] = _mm512_set1_epi16(int16_t(k + 1));
  for (int k = 0; k < 8; ++k) mv_y[k] = _mm256_set1_epi16(int16_t(k % 4 + 1));
  const __m512 d = _mm512_set1_ps(1.0001f), dm = _mm512_set1_ps(0.999f);
  const __m256 d_y = _mm256_set1_ps(1.0001f), dm_y = _mm256_set1_ps(0.999f);
  const double t0 = now();
  for (long i = 0; i < kIters; ++i) {
    const int w = int(i & 1);
    for (int k = 0; k < 4; ++k) {
      if (kTiles) unit_step(k);
      if (kFloat && kYmm)
        float_step_y(1 - w, k / 2, (k % 2) * 8, (k % 2) * 8 + 8, mv_y, d_y, d_y, dm_y, dm_y);
      if (kFloat && !kYmm) float_step(1 - w, k / 2, (k % 2) * 8, (k % 2) * 8 + 8, mv, d, dm);
    }
    if (kTiles) {
      _tile_stored(0, sums[w][0][0], 64);
      _tile_stored(1, sums[w][0][1], 64);
      _tile_stored(2, sums[w][1][0], 64);
      _tile_stored(3, sums[w][1][1], 64);
    }
  }
  return (now() - t0) / kIters / 32 * 1e9;  // per token row of 16 outputs
}

}  // namespace

int main() {
  constexpr int kArchRequestXcompPerm = 0x1023, kXfeatureTileData = 18;
  if (syscall(SYS_arch_prctl, kArchRequestXcompPerm, kXfeatureTileData) != 0) {
    std::fprintf(stderr, "amx_overlap_probe: the kernel does not grant AMX tile data\n");
    return 1;
  }
  static const TileConfig config;
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_loadd(4, act[0][0], 64);
  _tile_loadd(6, wts[0][0], 64);
  _tile_loadd(7, wts[0][1], 64);
  std::printf("part 1: ns a loop (2 tile products, 2 blocks of work)\n");
  std::printf("  tile products alone               %6.1f\n", part1<0, true, false>());
  const char* names[] = {"32 scalar imul (4 chains)",
                         "64 zmm vfmadd231ps",
                         "128 ymm vfmadd231ps",
                         "128 zmm vpaddd",
                         "128 zmm loads (L1)",
                         "64 zmm vpdpwssd (8 chains)",
                         "64 zmm vcvtdq2ps",
                         "64 zmm vmulps",
                         "64 zmm vpslld",
                         "64 zmm broadcast loads"};
  auto row = [&](int i, double alone, double both) {
    std::printf("  %-32s alone %6.1f   with tiles %6.1f\n", names[i], alone, both);
  };
  row(0, part1<0, false, true>(), part1<0, true, true>());
  row(1, part1<1, false, true>(), part1<1, true, true>());
  row(2, part1<2, false, true>(), part1<2, true, true>());
  row(3, part1<3, false, true>(), part1<3, true, true>());
  row(4, part1<4, false, true>(), part1<4, true, true>());
  row(5, part1<5, false, true>(), part1<5, true, true>());
  row(6, part1<6, false, true>(), part1<6, true, true>());
  row(7, part1<7, false, true>(), part1<7, true, true>());
  row(8, part1<8, false, true>(), part1<8, true, true>());
  row(9, part1<9, false, true>(), part1<9, true, true>());
  std::printf("part 2: ns a token row of 16 outputs, the amx Q4_K kernels' pattern (L1 data)\n");
  std::printf("  tile products and their loads     %6.2f\n", part2<true, false>());
  std::printf("  float steps                       %6.2f\n", part2<false, true>());
  std::printf("  both, interleaved as the kernel   %6.2f\n", part2<true, true>());
  std::printf("  float steps on ymm                %6.2f\n", part2<false, true, true>());
  std::printf("  both, the float steps on ymm      %6.2f\n", part2<true, true, true>());
  _tile_release();
  return 0;
}
