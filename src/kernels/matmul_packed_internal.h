// Shared pieces of the packed AVX2 matmul (matmul_packed_avx2.h): load
// helpers (prefetch: matmul_packed_prefetch.h), the packing transpose, the
// per-type kernel table (Ops), and the int16 step loops that the 4/5-bit
// kernels share. Included only by the matmul_packed_*.inc kernels, which
// their _avx2.cc, _vnni.cc and _avx512.cc files compile once per tier.
//
// Group layouts (8 rows; every 256-bit load 32-byte aligned; qs[i][r] is 4
// bytes of row r, so a broadcast 4-byte activation chunk meets 8 rows):
//   Q4_1: per block b (32 elements), 160 bytes: qs[4][8 rows][4 bytes] (low
//         nibbles elements 4i..4i+3, high nibbles 16+4i..16+4i+3), half d[8],
//         half m[8]                                  (matmul_packed_q4_1.inc)
//   Q4_0: per block, 144 bytes: qs as Q4_1, half d[8]
//   Q5_0: per block, 176 bytes: qs as Q4_1, hb[8 rows][4 bytes] (fifth bits),
//         half d[8]
//   Q5_1: per block, 192 bytes: qs, hb as Q5_0, half d[8], half m[8]
//                                     (these three: matmul_packed_q4_0_q5.inc)
//   Q8_0: per pair of blocks, 544 bytes: qs[8][8 rows][4 bytes] of each (bytes
//         4i..4i+3 = elements), half d[8] of each    (matmul_packed_q8_0.inc)
//   Q4_K: per super-block (256), 1184 bytes; Q5_K: 1440; Q6_K: 1680
//                                                    (matmul_packed_kquants.inc)
// Groups follow each other, so a run of groups is one linear stream.
//
// "Unpacked" groups (many-token calls on the avx2 / avx_vnni tiers; avx512
// runs them as slices of its one-pass kernels): the 4/5/6-bit quants split
// to one unsigned byte per element once per group, kUnpackedBlock bytes per
// 32 elements: for i in 0..3 the low-nibble vector of qs[i] (elements
// 4i..4i+3 of the 8 rows), then its high-nibble vector (16+4i..16+4i+3).
//
// Thread-safety: stateless functions and immutable tables.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/matmul_act_avx2.h"
#include "kernels/matmul_packed_avx2.h"

// ------------------------------------------------------------------- tiers
//
// This header and the kernel files are compiled once per tier, with the
// flags of that tier (CMakeLists.txt): everything below with external
// linkage lives in the tier's namespace, so no inline function of one tier
// can stand in for another's at link time (which would run AVX-512 code on a
// CPU without it). The tier is read from the compiler's target macros:
//   amx      (-mamx-int8 and avx512's):     the tile unit (matmul_packed_kquants_amx.cc)
//   avx512   (-mavx512vnni -mavx512vl ...): EVEX vpdpbusd, 32 registers
//   avx_vnni (-mavxvnni):                   VEX vpdpbusd
//   avx2:                                   maddubs + madd
// (GCC spells the AMX macros __AMX_INT8__, clang __AMXINT8__.)
#if (defined(__AMX_INT8__) || defined(__AMXINT8__)) && defined(__AVX512VNNI__) && \
    defined(__AVX512VL__)
#define OMNIBUS_PACKED_TIER amx
#define OMNIBUS_PACKED_VNNI 1
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define OMNIBUS_PACKED_TIER avx512
#define OMNIBUS_PACKED_VNNI 1
#elif defined(__AVXVNNI__)
#define OMNIBUS_PACKED_TIER avx_vnni
#define OMNIBUS_PACKED_VNNI 1
#else
#define OMNIBUS_PACKED_TIER avx2
#define OMNIBUS_PACKED_VNNI 0
#endif

#include "kernels/matmul_packed_prefetch.h"  // after the tier: its functions are per tier

namespace omnibus::matmul_packed::internal {

using matmul_act::ActBlock1;
using matmul_act::ActBlock32;
using matmul_act::ActBlockK;
using matmul_act::Gate;
using matmul_act::kTok;

inline constexpr size_t kUnpackedBlock = 256;  // bytes per 32 elements of an unpacked group

// ------------------------------------------------------------------ packing

// 8 rows' block pointers; rows past n_out read a zero block (step 0).
struct GroupRows {
  const uint8_t* row[kGroupRows];
  size_t step[kGroupRows];
};

GroupRows group_rows(const WeightView& w, int64_t g, size_t block_bytes, const uint8_t* zero);

// ------------------------------------------------------------- kernel table

// Kernels take the activation tile as void*: ActBlock32[nb] (32-element
// formats; with Ops::with_qsum followed by int32 qsum[nb][kTok]) or
// ActBlockK[nb] (K-quants), per Ops::k_act; Ops::one takes one token's
// ActBlock1[nb].
using KernelFn = void (*)(const uint8_t* group, int64_t nb, const void* act, float* y,
                          int64_t y_stride, int n_rows);
using PairFn = void (*)(const uint8_t* group0, const uint8_t* group1, int64_t nb, const void* act,
                        float* y, int64_t y_stride, int n_rows1);
using PackFn = void (*)(const WeightView& w, int64_t g, uint8_t* out);
using UnpackFn = void (*)(const uint8_t* group, int64_t nb, uint8_t* out);
using UnpackedPairFn = void (*)(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                                const uint8_t* group1, int64_t nb, const void* act, float* y,
                                int64_t y_stride, int n_rows1);
using UnpackedKernelFn = void (*)(const uint8_t* unpacked, const uint8_t* group, int64_t nb,
                                  const void* act0, const void* act1, float* y, int64_t y_stride,
                                  int n_rows);
// Two packed groups x T tokens of up to kWideMaxTok / kTok activation tiles
// (tokens 0..kTok-1 from act0, the next kTok from act1, any more from the
// tiles after act1, nb blocks apart: see wide_tiles) in one pass over the
// groups.
using WidePairFn = void (*)(const uint8_t* group0, const uint8_t* group1, int64_t nb,
                            const void* act0, const void* act1, float* y, int64_t y_stride,
                            int n_rows1);
constexpr int kWideMaxTok = 4 * kTok;
// A wide kernel's tiles: act0, act1, then those after act1 (T > 2 kTok).
template <class Block>
inline void wide_tiles(const Block* act0, const Block* act1, int64_t nb,
                       const Block* (&tiles)[kWideMaxTok / kTok]) {
  tiles[0] = act0;
  for (int k = 1; k < kWideMaxTok / kTok; ++k) tiles[k] = act1 + (k - 1) * nb;
}

// The amx tier's many-token calls on two groups (16 rows): amx_pair runs up
// to kAmxCallTok tokens per call from their Q8_K activations as rows, in
// blocks of 16 tokens (AmxActRows; each next block act16_block bytes on; zero
// rows past the call's tokens up to its last block's end), laying each
// super-block's quants out as tile-unit operands once for all of them.
constexpr int kAmxCallTok = 512;
struct AmxActRows {      // one super-block of 16 tokens
  int8_t qs[4][16][64];  // [64-element chunk c][token]: one tile operand per c
  float d[16];
  int16_t bsum_pairs[16][8];
};
static_assert(sizeof(AmxActRows) % 64 == 0);
using AmxPairFn = void (*)(const uint8_t* group0, const uint8_t* group1, int64_t nb,
                           const AmxActRows* act16, size_t act16_block, int n_valid, float* y,
                           int64_t y_stride, int n_rows1);
// The same on four adjacent groups (32 rows: group i at group0 + i gb, y's
// outputs 0..31, the last group n_rows3 valid): each activation row the tile
// unit loads (from L2) serves twice the outputs.
using AmxQuadFn = void (*)(const uint8_t* group0, size_t gb, int64_t nb, const AmxActRows* act16,
                           size_t act16_block, int n_valid, float* y, int64_t y_stride,
                           int n_rows3);
// A gated quad: two adjacent groups of W_gate (gate0, gate0 + gb) and the
// same two of W_up (up0, up0 + gb), every row valid; y's 16 outputs of a
// token are act(gate, up) of those rows (act: kSwiglu or kGeglu), the gated
// feed-forward block's hidden values, and neither product is written.
using AmxGatedFn = void (*)(const uint8_t* gate0, const uint8_t* up0, size_t gb, int64_t nb,
                            const AmxActRows* act16, size_t act16_block, int n_valid, float* y,
                            int64_t y_stride, Gate act);

// A packed type's kernels. Calls of 1..2 kTok tokens take wide_pair where
// the type has one for that count; calls of up to 4 kTok tokens too, in one
// pass, and longer ones (up to kMaxSlicedTok) in slices of 2 kTok (of up to
// 4 kTok where it has every count to 4 kTok), where it has no amx_pair;
// other calls with more than
// packed_tiles token tiles unpack (quants split to bytes once per group;
// upair for two groups, else unpacked_single if any, else kernel); the rest
// run pair (several tiles, two groups per call) or else kernel, per tile.
struct Ops {
  KernelFn kernel[kTok + 1];  // one packed group, T tokens
  // One packed group x one token from ActBlock1 rows, for one-token calls
  // that run single groups (null: kernel[1] on a tile). Bitwise kernel[1].
  KernelFn one = nullptr;
  PackFn pack;
  size_t (*used_bytes)(int64_t nb);  // bytes of a group of nb activation blocks
  int block_elems = 32;              // elements per activation block
  bool k_act = false;                // ActBlockK (Q8_K) activation tiles, else ActBlock32
  bool with_sum = false;             // ActBlock32 with Q8_1 sums
  bool with_qsum = false;      // ActBlock32 tiles followed by exact sums (quantize_tile's qsum)
  PairFn pair[kTok + 1] = {};  // two packed groups per call (null: none)
  UnpackFn unpack = nullptr;   // null: no unpacked path
  // The most token tiles a call runs on the packed groups before it unpacks
  // (0: matmul_packed_avx2.cc's kMaxPackedTiles).
  int packed_tiles = 0;
  UnpackedPairFn upair[kTok + 1] = {};
  UnpackedKernelFn unpacked_single[2 * kTok + 1] = {};  // null: kernel on the packed group
  // [1, kWideMaxTok] tokens (null: none); a type with wide_pair[kWideMaxTok]
  // has every count from kTok + 1 up
  WidePairFn wide_pair[kWideMaxTok + 1] = {};
  // wide_pair[1] from one token's ActBlock1 rows (act0 = act1; null:
  // wide_pair[1] on a tile). Bitwise wide_pair[1].
  WidePairFn one_pair = nullptr;
  AmxPairFn amx_pair = nullptr;    // the amx tier's many-token pairs (null: none)
  AmxQuadFn amx_quad = nullptr;    // and quads of groups (with amx_pair)
  AmxGatedFn amx_gated = nullptr;  // and gated quads (with amx_pair)
};

// Bytes per activation block of a 32-element format's tile: the block and,
// with_qsum, its share of the tile's exact sums (matmul_multi's layout).
inline size_t act_block_bytes32(bool with_qsum) {
  return sizeof(ActBlock32) + (with_qsum ? kTok * sizeof(int32_t) : 0);
}

// Each tier's kernel tables (matmul_packed_*_avx2.cc compiled once per tier:
// the *_vnni.cc and *_avx512.cc files include them with that tier's flags).
#define OMNIBUS_PACKED_OPS_DECLS \
  const Ops& ops_q4_0();         \
  const Ops& ops_q4_1();         \
  const Ops& ops_q5_0();         \
  const Ops& ops_q5_1();         \
  const Ops& ops_q8_0();         \
  const Ops& ops_q4_K();         \
  const Ops& ops_q5_K();         \
  const Ops& ops_q6_K();

namespace avx2 {
OMNIBUS_PACKED_OPS_DECLS
}
namespace avx_vnni {
OMNIBUS_PACKED_OPS_DECLS
}
namespace avx512 {
OMNIBUS_PACKED_OPS_DECLS
}
#undef OMNIBUS_PACKED_OPS_DECLS
// The amx tier: avx512's tables, the K-quants' with the tile-unit pair.
namespace amx {
const Ops& ops_q4_K();
const Ops& ops_q5_K();
const Ops& ops_q6_K();
}  // namespace amx

namespace OMNIBUS_PACKED_TIER {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i load256a(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline __m256i bcast32(const void* p) { return _mm256_set1_epi32(load_i32(p)); }

// Offsets in a packed Q4_K / Q5_K group: quants qs (and Q5_K's hb) of
// sub-block j, then the shared tail sc, mn, d, dmin.
struct LayoutQ4_K {
  static constexpr bool kFifth = false;
  static constexpr size_t kSuper = 1184, kSub = 128, kTail = 8 * kSub;
  static size_t qs(int64_t sb, int j) { return size_t(sb) * kSuper + kSub * size_t(j); }
  static size_t sc(int64_t sb, int j) { return size_t(sb) * kSuper + kTail + 8 * size_t(j); }
  static size_t mn(int64_t sb, int k) { return size_t(sb) * kSuper + kTail + 64 + 16 * size_t(k); }
  static size_t d(int64_t sb) { return size_t(sb) * kSuper + kTail + 128; }
  static size_t dmin(int64_t sb) { return size_t(sb) * kSuper + kTail + 144; }
};
struct LayoutQ5_K {
  static constexpr bool kFifth = true;
  static constexpr size_t kSuper = 1440, kSub = 160, kTail = 8 * kSub;
  static size_t qs(int64_t sb, int j) { return size_t(sb) * kSuper + kSub * size_t(j); }
  static size_t hb(int64_t sb, int j) { return qs(sb, j) + 128; }
  static size_t sc(int64_t sb, int j) { return size_t(sb) * kSuper + kTail + 8 * size_t(j); }
  static size_t mn(int64_t sb, int k) { return size_t(sb) * kSuper + kTail + 64 + 16 * size_t(k); }
  static size_t d(int64_t sb) { return size_t(sb) * kSuper + kTail + 128; }
  static size_t dmin(int64_t sb) { return size_t(sb) * kSuper + kTail + 144; }
};
static_assert(LayoutQ4_K::kTail + 160 == LayoutQ4_K::kSuper &&
              LayoutQ5_K::kTail + 160 == LayoutQ5_K::kSuper);

// Offsets in a packed Q6_K group (matmul_packed_kquants.inc): super-block
// sb's ql, qh, scales (8 rows each) and d.
constexpr size_t kSuper6 = 1680;
inline size_t ql6(int64_t sb, int w) { return size_t(sb) * kSuper6 + 32 * size_t(w); }
inline size_t qh6(int64_t sb, int s) { return size_t(sb) * kSuper6 + 1024 + 32 * size_t(s); }
inline size_t sc6(int64_t sb, int s) { return size_t(sb) * kSuper6 + 1536 + 8 * size_t(s); }
inline size_t d6(int64_t sb) { return size_t(sb) * kSuper6 + 1664; }

#ifndef OMNIBUS_PACKED_BARRIER
#define OMNIBUS_PACKED_BARRIER 1
#endif
// An empty asm that makes the compiler materialize v here: stops GCC from
// reassociating the exact integer sums into a tree of products that spills
// (it computes them all before adding). No instruction is emitted.
inline void keep_in_register(__m256i& v) {
  if constexpr (OMNIBUS_PACKED_BARRIER) asm("" : "+x"(v));
}

// Stores 8 lanes of acc as rows [0, n_rows) of y.
inline void store_rows(float* y, __m256 acc, int n_rows) {
  if (n_rows == kGroupRows) {
    _mm256_storeu_ps(y, acc);
  } else {
    alignas(32) float tmp[kGroupRows];
    _mm256_store_ps(tmp, acc);
    std::memcpy(y, tmp, size_t(n_rows) * sizeof(float));
  }
}

// Stores the T tokens' results of a group pair: rows 0-7 from acc0, rows
// 8..8+n_rows1 from acc1.
template <int T>
inline void store_pair_rows(float* y, int64_t y_stride, const __m256 acc0[T], const __m256 acc1[T],
                            int n_rows1) {
  for (int t = 0; t < T; ++t) {
    store_rows(y + t * y_stride, acc0[t], kGroupRows);
    store_rows(y + t * y_stride + kGroupRows, acc1[t], n_rows1);
  }
}

// 4 x (4 dwords of rows p, p+4 in the two 128-bit halves) -> dword i of rows 0..7.
inline void transpose_4x8(const __m256i v[4], __m256i o[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  o[0] = _mm256_unpacklo_epi64(t0, t2);
  o[1] = _mm256_unpackhi_epi64(t0, t2);
  o[2] = _mm256_unpacklo_epi64(t1, t3);
  o[3] = _mm256_unpackhi_epi64(t1, t3);
}

// Stores the 16-byte rows q[0..7] as qs[4][8 rows][4 bytes] at out.
inline void store_transposed_16(const uint8_t* const q[kGroupRows], uint8_t* out) {
  __m256i v[4], o[4];
  for (int p = 0; p < 4; ++p) v[p] = _mm256_set_m128i(load128(q[p + 4]), load128(q[p]));
  transpose_4x8(v, o);
  for (int i = 0; i < 4; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * i), o[i]);
}

// ------------------------------------------------------------- step sums
//
// A step sum is a lane's running sum of unsigned x signed byte products of
// one row (4 products per 32-bit lane and vector):
//   avx2: two int16 halves (maddubs pairs added in int16; the caller keeps
//         them exact: |pair| <= 2 * qmax * 127, summed over the steps)
//   vnni: one int32 (vpdpbusd adds the 4 products to the lane)
// sum_i32 and sum_scaled turn either into the same exact int32, so every
// tier gives bitwise the same results.

#if OMNIBUS_PACKED_VNNI
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#endif
}
#endif

// acc + the exact int32 sum of each lane's 4 products u x s. avx2: the
// products' pairs must fit int16 (|u x s| pairs <= 32767).
inline __m256i dot4_add(__m256i acc, __m256i u, __m256i s) {
#if OMNIBUS_PACKED_VNNI
  return dpbusd(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// The step sum s plus u0 x a0 + u1 x a1 (a zero s starts a sum: GCC folds
// the avx2 add of zero away).
inline __m256i step_add(__m256i s, __m256i u0, __m256i a0, __m256i u1, __m256i a1) {
#if OMNIBUS_PACKED_VNNI
  return dpbusd(dpbusd(s, u0, a0), u1, a1);
#else
  return _mm256_add_epi16(
      s, _mm256_add_epi16(_mm256_maddubs_epi16(u0, a0), _mm256_maddubs_epi16(u1, a1)));
#endif
}

// The exact int32 of a step sum.
inline __m256i sum_i32(__m256i s) {
#if OMNIBUS_PACKED_VNNI
  return s;
#else
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
#endif
}

// One sub-block's scales of a group's 8 rows (8 bytes, one per row: u8 for
// Q4_K / Q5_K, i8 for Q6_K) in the form sum_scaled takes: vnni one int32 per
// lane, avx2 the scale twice, as an int16 pair (for madd).
inline __m256i row_scales(__m256i s32) {
#if OMNIBUS_PACKED_VNNI
  return s32;
#else
  return _mm256_blend_epi16(s32, _mm256_slli_epi32(s32, 16), 0xAA);
#endif
}
inline __m256i load_scales_u8(const uint8_t* p) {
  return row_scales(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256i load_scales_i8(const uint8_t* p) {
  return row_scales(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// The exact int32 of a step sum times its row's scale (sc from load_scales_*).
inline __m256i sum_scaled(__m256i s, __m256i sc) {
#if OMNIBUS_PACKED_VNNI
  return _mm256_mullo_epi32(s, sc);
#else
  return _mm256_madd_epi16(s, sc);
#endif
}

// Steps [I0, I1) of one 32-element block against T tokens: step i meets
// row bytes lo (elements 4i..4i+3) with token t's aq[t] + 4i, and hi
// (16+4i..) with aq[t] + 16 + 4i, into the step sum s[t] (the first step
// sets it). load(i, &lo, &hi) gives step i's unsigned quant vectors.
template <int T, int I0, int I1, class Load>
inline void steps_sum(Load load, const int8_t* const aq[T], __m256i s[T]) {
#pragma GCC unroll 4
  for (int i = I0; i < I1; ++i) {
    __m256i lo, hi;
    load(i, &lo, &hi);
    for (int t = 0; t < T; ++t) {
      if (i == I0) s[t] = _mm256_setzero_si256();
      s[t] = step_add(s[t], lo, bcast32(aq[t] + 4 * i), hi, bcast32(aq[t] + 16 + 4 * i));
      keep_in_register(s[t]);
    }
  }
}

// steps_sum on two unpacked groups at once (v0, v1: the block's
// kUnpackedBlock bytes of each): each activation broadcast feeds both.
template <int T, int I0, int I1>
inline void pair_steps_sum(const uint8_t* v0, const uint8_t* v1, const int8_t* const aq[T],
                           __m256i s0[T], __m256i s1[T]) {
#pragma GCC unroll 4
  for (int i = I0; i < I1; ++i) {
    const __m256i lo0 = load256a(v0 + 64 * i), hi0 = load256a(v0 + 64 * i + 32);
    const __m256i lo1 = load256a(v1 + 64 * i), hi1 = load256a(v1 + 64 * i + 32);
    for (int t = 0; t < T; ++t) {
      const __m256i al = bcast32(aq[t] + 4 * i), ah = bcast32(aq[t] + 16 + 4 * i);
      if (i == I0) s0[t] = s1[t] = _mm256_setzero_si256();
      s0[t] = step_add(s0[t], lo0, al, hi0, ah);
      s1[t] = step_add(s1[t], lo1, al, hi1, ah);
      keep_in_register(s0[t]);
      keep_in_register(s1[t]);
    }
  }
}

// Splits a 4-bit block (qs as Q4_1, 128 bytes) to bytes: kUnpackedBlock bytes.
inline void unpack_nibbles_block(const uint8_t* qs, uint8_t* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int i = 0; i < 4; ++i) {
    const __m256i wq = load256(qs + 32 * i);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * i), _mm256_and_si256(wq, m4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 64 * i + 32),
                       _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4));
  }
}

// ------------------------------------------------------- 5-bit quants
//
// Q5_0 / Q5_1 groups carry, after qs, hb[8 rows][4 bytes]: byte k of row r's
// hb holds the fifth bits of the elements that byte k of qs[i] carries: bit
// 2i that of its low nibble (element 4i+k), bit 2i+1 that of its high nibble
// (element 16+4i+k).

// Packs 8 rows' qh (Q5_0 / Q5_1 layout: bit j = element j) into hb.
inline void pack_fifth_bits(const uint8_t* const qh[kGroupRows], uint8_t* hb) {
  for (int r = 0; r < kGroupRows; ++r) {
    const uint32_t bits = uint32_t(load_i32(qh[r]));
    for (int k = 0; k < 4; ++k) {
      uint8_t byte = 0;
      for (int i = 0; i < 4; ++i) {
        byte |= uint8_t(((bits >> (4 * i + k)) & 1u) << (2 * i));
        byte |= uint8_t(((bits >> (16 + 4 * i + k)) & 1u) << (2 * i + 1));
      }
      hb[4 * r + k] = byte;
    }
  }
}

// The fifth bits of step i's low (p = 2i) or high (p = 2i + 1) nibbles, as
// 0x10 per byte (16-bit shifts: the bits crossing a byte boundary never land
// on bit 4).
inline __m256i fifth_bits(__m256i hb, int p) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  if (p <= 4) return _mm256_and_si256(_mm256_sll_epi16(hb, _mm_cvtsi32_si128(4 - p)), bit4);
  return _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(p - 4)), bit4);
}

// Step i's unsigned 5-bit quants (nibble | fifth bit << 4) of a block's qs
// and hb: low and high halves.
inline void load_step_5bit(const uint8_t* q, __m256i hb, int i, __m256i* lo, __m256i* hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i wq = load256(q + 32 * i);
  *lo = _mm256_or_si256(_mm256_and_si256(wq, m4), fifth_bits(hb, 2 * i));
  *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wq, 4), m4), fifth_bits(hb, 2 * i + 1));
}

// Splits a 5-bit block (qs, hb) to bytes: kUnpackedBlock bytes.
inline void unpack_5bit_block(const uint8_t* qs, const uint8_t* hb_bytes, uint8_t* out) {
  const __m256i hb = load256(hb_bytes);
  auto* o = reinterpret_cast<__m256i*>(out);
  for (int i = 0; i < 4; ++i) {
    __m256i lo, hi;
    load_step_5bit(qs, hb, i, &lo, &hi);
    _mm256_store_si256(o + 2 * i, lo);
    _mm256_store_si256(o + 2 * i + 1, hi);
  }
}

// The exact activation sums that follow an ActBlock32 tile of nb blocks
// (Ops::with_qsum): [nb][kTok].
inline const int32_t* tile_qsum(const ActBlock32* act, int64_t nb) {
  return reinterpret_cast<const int32_t*>(act + nb);
}

// How a 32-element format's kernel reads its activations (its View template
// parameter), token t of block b: TileView, a tile's kTok tokens
// (ActBlock32[nb], with Ops::with_qsum quantize_tile's qsum after them), or
// RowView, one token's blocks (ActBlock1[nb], Ops::one; t is 0). The same
// numbers either way (quantize_row1 is quantize_tile's lane 0).
struct TileView {
  const ActBlock32* act = nullptr;
  const int32_t* sums = nullptr;
  TileView() = default;
  TileView(const void* a, int64_t nb)
      : act(static_cast<const ActBlock32*>(a)), sums(tile_qsum(act, nb)) {}
  const int8_t* qs(int64_t b, int t) const { return act[b].qs[t]; }
  const float* d(int64_t b, int t) const { return &act[b].d[t]; }
  const float* s(int64_t b, int t) const { return &act[b].s[t]; }
  int32_t qsum(int64_t b, int t) const { return sums[b * kTok + t]; }
};
struct RowView {
  const ActBlock1* act = nullptr;
  RowView() = default;
  RowView(const void* a, int64_t /*nb*/) : act(static_cast<const ActBlock1*>(a)) {}
  const int8_t* qs(int64_t b, int /*t*/) const { return act[b].qs; }
  const float* d(int64_t b, int /*t*/) const { return &act[b].d; }
  const float* s(int64_t b, int /*t*/) const { return &act[b].s; }
  int32_t qsum(int64_t b, int /*t*/) const { return act[b].qsum; }
};

// A 32-element format's wide kernel's views of the tiles of T tokens (as
// wide_tiles): act0, act1, then the tiles after act1, each nb blocks of
// act_block_bytes32(with_qsum) (a RowView is one tile).
template <class View, int T>
inline void wide_views(const void* act0, const void* act1, int64_t nb, bool with_qsum,
                       View (&views)[kWideMaxTok / kTok]) {
  static_assert(T >= 1 && T <= kWideMaxTok);
  views[0] = View(act0, nb);
  views[1] = View(act1, nb);
  const size_t tile_bytes = size_t(nb) * act_block_bytes32(with_qsum);
  for (int k = 2; k < (T + kTok - 1) / kTok; ++k)
    views[k] = View(static_cast<const uint8_t*>(act1) + size_t(k - 1) * tile_bytes, nb);
}

#if defined(__AVX512F__)
// ------------------------------------------------------ 512-bit group pairs
//
// The avx512 tier's pair kernels hold two 8-row groups in one register:
// lanes 0-7 rows 0-7 of group 0, lanes 8-15 its group 1 (the next 8 rows of
// y), so each instruction does the work of two 256-bit ones and the float
// work of a block is one op for 16 outputs. Per lane the operations are the
// 256-bit kernels', in the same order: bitwise the same results.

// 32 bytes at p0 (low half) and at p1 (high half).
inline __m512i join256(const void* p0, const void* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256a(p0)), load256a(p1), 1);
}
// join256 of unaligned addresses (Q6_K's 1680-byte super-blocks).
inline __m512i join256u(const void* p0, const void* p1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(p0)), load256(p1), 1);
}
// 8 halfs at p0 and 8 at p1 as 16 floats.
inline __m512 join_halfs(const void* p0, const void* p1) {
  return _mm512_cvtph_ps(_mm256_set_m128i(load128(p1), load128(p0)));
}
inline __m512i bcast32_512(const void* p) { return _mm512_set1_epi32(load_i32(p)); }
// acc + vpdpbusd(w, the 4 bytes at p in every lane) as the instruction's own
// broadcast operand ({1to16}); GCC 12 loads _mm512_set1_epi32(load) into a
// register first, one more vector op. Used where it measured faster:
// kernel_k4_wide512 (Zen 5, 512 tokens of 4096 x 14336 Q4_K: -13%); Q8_0's
// wide kernel ran 3-7% slower with it, Q6_K's the same (round (k)).
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// Step i of a 32-element block of two groups, its quants one per byte with
// group 0's rows in the low half: elements 4i..4i+3 (lo) and 16+4i..16+4i+3
// (hi). 4-bit quants at qs0 / qs1, laid out as Q4_1's (the nibble split of
// the 256-bit kernels), or 5-bit ones with each group's fifth bits hb0 / hb1
// (load_step_5bit's).
inline void pair_step_4bit(const uint8_t* qs0, const uint8_t* qs1, int i, __m512i* lo,
                           __m512i* hi) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i w = join256u(qs0 + 32 * i, qs1 + 32 * i);
  *lo = _mm512_and_si512(w, m4);
  *hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
}
inline void pair_step_5bit(const uint8_t* qs0, __m256i hb0, const uint8_t* qs1, __m256i hb1, int i,
                           __m512i* lo, __m512i* hi) {
  __m256i lo0, hi0, lo1, hi1;
  load_step_5bit(qs0, hb0, i, &lo0, &hi0);
  load_step_5bit(qs1, hb1, i, &lo1, &hi1);
  *lo = _mm512_inserti64x4(_mm512_castsi256_si512(lo0), lo1, 1);
  *hi = _mm512_inserti64x4(_mm512_castsi256_si512(hi0), hi1, 1);
}

// The K-quant scales of one sub-block of two groups (8 signed bytes each: one
// per row) as one int32 per lane.
inline __m512i join_scales8(const void* p0, const void* p1) {
  int64_t s0, s1;
  std::memcpy(&s0, p0, 8);
  std::memcpy(&s1, p1, 8);
  return _mm512_cvtepi8_epi32(_mm_set_epi64x(s1, s0));
}

inline void keep_in_register(__m512i& v) {
  if constexpr (OMNIBUS_PACKED_BARRIER) asm("" : "+v"(v));
}

// Stores the T tokens' results of a group pair: rows 0-7 and 8..8+n_rows1.
template <int T>
inline void store_pair_rows512(float* y, int64_t y_stride, const __m512 acc[T], int n_rows1) {
  const __mmask16 mask = __mmask16((1u << (kGroupRows + n_rows1)) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

#endif  // __AVX512F__

}  // namespace OMNIBUS_PACKED_TIER
}  // namespace omnibus::matmul_packed::internal
