#include "kernels/matmul_packed_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_avx2.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_ref.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus::matmul_packed {
namespace {

using matmul_avx2::ActBlock32;
using matmul_avx2::ActBlockK;
using matmul_avx2::kTok;

// Group layout (nb = n_in / 32 blocks; every 256-bit load 32-byte aligned):
//   Q4_1: per block b, 160 bytes: qs[4][8 rows][4 bytes], half d[8], half m[8]
//   Q8_0: per pair of blocks (2p, 2p+1), 544 bytes: qs of 2p, qs of 2p+1
//         (each [8][8 rows][4 bytes]), half d[8] of 2p, half d[8] of 2p+1
//   Q5_0: per block b, 176 bytes: qs[4][8 rows][4 bytes] as Q4_1, then
//         hb[8 rows][4 bytes], then half d[8]. Byte k of row r's hb holds the
//         fifth bits of the elements that byte k of qs[i] carries: bit 2i
//         that of its low nibble (element 4i+k), bit 2i+1 that of its high
//         nibble (element 16+4i+k).
//   Q4_K: per super-block, 1248 bytes: for each sub-block j (32 elements),
//         qs[4][8 rows][4 bytes] laid out as a Q4_1 block (low nibbles
//         elements 32j+4i.., high nibbles 32j+16+4i..; 128 bytes), then
//         sc[8 sub-blocks][8 rows][2] (the 6-bit scale, twice: an int16 pair
//         after widening), mn[4][8 rows][2] (mins of sub-blocks 2k, 2k+1),
//         half d[8], half dmin[8].
//   Q6_K: per super-block, 1936 bytes: ql[32][8 rows][4 bytes] (byte k of
//         ql[w]: low nibble the low 4 bits of element 8w+k, high nibble those
//         of 8w+4+k), qh[16][8 rows][4 bytes] (byte k of qh[s]: bits 2m, 2m+1
//         the top 2 bits of element 16s+4m+k), sc[16][8 rows][2] (the int8
//         scale of sub-block s, twice), scp[8][8 rows][2] (scales of
//         sub-blocks 2k, 2k+1), half d[8]. Quants are unsigned (q in [0, 63],
//         the value is q - 32).
// qs[i][r] is bytes 4i..4i+3 of row r's block quants: for Q4_1 their low
// nibbles are elements 4i..4i+3 and high nibbles 16+4i..16+4i+3; for Q8_0
// they are elements 4i..4i+3. Groups follow each other, so a run of groups is
// one linear stream (hardware and software prefetch friendly).
constexpr size_t kBlock41 = 160, kPair80 = 544, kBlock50 = 176, kSuper4K = 1248, kSuper6K = 1936;
inline size_t qs41(int64_t b) { return size_t(b) * kBlock41; }
inline size_t sc41(int64_t b) { return size_t(b) * kBlock41 + 128; }
inline size_t qs80(int64_t b) { return size_t(b / 2) * kPair80 + size_t(b % 2) * 256; }
inline size_t sc80(int64_t b) { return size_t(b / 2) * kPair80 + 512 + size_t(b % 2) * 16; }
inline size_t qs50(int64_t b) { return size_t(b) * kBlock50; }
inline size_t hb50(int64_t b) { return size_t(b) * kBlock50 + 128; }
inline size_t sc50(int64_t b) { return size_t(b) * kBlock50 + 160; }
inline size_t qs4K(int64_t sb, int j) { return size_t(sb) * kSuper4K + 128 * size_t(j); }
inline size_t sc4K(int64_t sb, int j) { return size_t(sb) * kSuper4K + 1024 + 16 * size_t(j); }
inline size_t mn4K(int64_t sb, int k) { return size_t(sb) * kSuper4K + 1152 + 16 * size_t(k); }
inline size_t d4K(int64_t sb) { return size_t(sb) * kSuper4K + 1216; }
inline size_t dmin4K(int64_t sb) { return size_t(sb) * kSuper4K + 1232; }
inline size_t ql6K(int64_t sb, int w) { return size_t(sb) * kSuper6K + 32 * size_t(w); }
inline size_t qh6K(int64_t sb, int s) { return size_t(sb) * kSuper6K + 1024 + 32 * size_t(s); }
inline size_t sc6K(int64_t sb, int s) { return size_t(sb) * kSuper6K + 1536 + 16 * size_t(s); }
inline size_t scp6K(int64_t sb, int k) { return size_t(sb) * kSuper6K + 1792 + 16 * size_t(k); }
inline size_t d6K(int64_t sb) { return size_t(sb) * kSuper6K + 1920; }
// nb: blocks of the type's activation tile (32 elements, or 256 for the K-quants).
size_t group_used_bytes(DType type, int64_t nb) {
  switch (type) {
    case DType::Q4_1: return size_t(nb) * kBlock41;
    case DType::Q5_0: return size_t(nb) * kBlock50;
    case DType::Q4_K: return size_t(nb) * kSuper4K;
    case DType::Q6_K: return size_t(nb) * kSuper6K;
    default: return size_t((nb + 1) / 2) * kPair80;
  }
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
#ifndef OMNIBUS_PACKED_PREFETCH
#define OMNIBUS_PACKED_PREFETCH 1024
#endif
// Software prefetch distance (bytes ahead of the quants being read); the
// packed matrix is one linear stream, so this also covers the next group.
constexpr int kPrefetch = OMNIBUS_PACKED_PREFETCH;

inline void prefetch(const uint8_t* p) {
  if constexpr (kPrefetch > 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetch, _MM_HINT_T0);
}

#ifndef OMNIBUS_PACKED_BARRIER
#define OMNIBUS_PACKED_BARRIER 1
#endif
// An empty asm that makes the compiler materialize v here: stops GCC from
// reassociating the exact integer sums into a tree of products that spills
// (it computes them all before adding). No instruction is emitted.
inline void keep_in_register(__m256i& v) {
  if constexpr (OMNIBUS_PACKED_BARRIER) asm("" : "+x"(v));
}

// Prefetches a whole packed group (bytes) into L2; null (packed on the fly) is skipped.
inline void prefetch_group(const uint8_t* p, size_t bytes) {
  if (p == nullptr) return;
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + off, _MM_HINT_T1);
}

inline __m256i bcast32(const int8_t* p) { return _mm256_set1_epi32(load_i32(p)); }

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// --------------------------------------------------------------- packing

// 8 rows' block pointers; rows past n_out read a zero block (step 0).
struct GroupRows {
  const uint8_t* row[kGroupRows];
  size_t step[kGroupRows];
};

GroupRows group_rows(const WeightView& w, int64_t g, size_t block_bytes, const uint8_t* zero) {
  const size_t w_row = dtype_row_size(w.type, w.n_in);
  const auto* base = static_cast<const uint8_t*>(w.data);
  GroupRows rows;
  for (int r = 0; r < kGroupRows; ++r) {
    const int64_t row = g * kGroupRows + r;
    const bool valid = row < w.n_out;
    rows.row[r] = valid ? base + size_t(row) * w_row : zero;
    rows.step[r] = valid ? block_bytes : 0;
  }
  return rows;
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

void pack_group_q4_1(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ4_1 zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ4_1), reinterpret_cast<const uint8_t*>(&zero));
  // [d0 m0 d1 m1 d2 m2 d3 m3] per 128-bit half -> [d0..d3 m0..m3]
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_1* blk[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const BlockQ4_1*>(rows.row[r] + size_t(b) * rows.step[r]);
    }
    __m256i v[4], o[4];
    for (int p = 0; p < 4; ++p) v[p] = _mm256_set_m128i(load128(blk[p + 4]->qs), load128(blk[p]->qs));
    transpose_4x8(v, o);
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + qs41(b) + 32 * i), o[i]);
    }
    const __m256i dm = _mm256_setr_epi32(load_i32(blk[0]), load_i32(blk[1]), load_i32(blk[2]),
                                         load_i32(blk[3]), load_i32(blk[4]), load_i32(blk[5]),
                                         load_i32(blk[6]), load_i32(blk[7]));
    const __m256i s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(dm, split), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + sc41(b)), s);
  }
}

void pack_group_q5_0(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ5_0 zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ5_0), reinterpret_cast<const uint8_t*>(&zero));
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ5_0* blk[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const BlockQ5_0*>(rows.row[r] + size_t(b) * rows.step[r]);
    }
    __m256i v[4], o[4];
    for (int p = 0; p < 4; ++p) v[p] = _mm256_set_m128i(load128(blk[p + 4]->qs), load128(blk[p]->qs));
    transpose_4x8(v, o);
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + qs50(b) + 32 * i), o[i]);
    }
    uint8_t* hb = out + hb50(b);
    uint16_t d[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      const uint32_t qh = uint32_t(load_i32(blk[r]->qh));
      for (int k = 0; k < 4; ++k) {
        uint8_t byte = 0;
        for (int i = 0; i < 4; ++i) {
          byte |= uint8_t(((qh >> (4 * i + k)) & 1u) << (2 * i));
          byte |= uint8_t(((qh >> (16 + 4 * i + k)) & 1u) << (2 * i + 1));
        }
        hb[4 * r + k] = byte;
      }
      d[r] = blk[r]->d;
    }
    std::memcpy(out + sc50(b), d, sizeof(d));
  }
}

void pack_group_q4_K(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ4_K zero{};
  const int64_t nsb = w.n_in / kQKK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ4_K), reinterpret_cast<const uint8_t*>(&zero));
  for (int64_t sb = 0; sb < nsb; ++sb) {
    // Each row's sub-blocks re-nibbled as Q4_1 blocks: byte k = q[k] | q[16 + k] << 4.
    alignas(16) uint8_t q41[kGroupRows][8][16];
    uint16_t d[kGroupRows], dmin[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(rows.row[r] + size_t(sb) * rows.step[r]);
      auto quant = [&](int e) {  // element e of the super-block, 0..15
        const uint8_t byte = blk->qs[32 * (e / 64) + e % 32];
        return uint8_t(e % 64 < 32 ? byte & 0x0F : byte >> 4);
      };
      for (int j = 0; j < 8; ++j) {
        for (int k = 0; k < 16; ++k) q41[r][j][k] = uint8_t(quant(32 * j + k) | quant(32 * j + 16 + k) << 4);
        uint8_t sc, m;
        get_scale_min_k4(j, blk->scales, &sc, &m);
        out[sc4K(sb, j) + 2 * r] = out[sc4K(sb, j) + 2 * r + 1] = sc;
        out[mn4K(sb, j / 2) + 2 * r + j % 2] = m;
      }
      d[r] = blk->d;
      dmin[r] = blk->dmin;
    }
    for (int j = 0; j < 8; ++j) {
      __m256i v[4], o[4];
      for (int p = 0; p < 4; ++p) v[p] = _mm256_set_m128i(load128(q41[p + 4][j]), load128(q41[p][j]));
      transpose_4x8(v, o);
      for (int i = 0; i < 4; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + qs4K(sb, j) + 32 * i), o[i]);
    }
    std::memcpy(out + d4K(sb), d, sizeof(d));
    std::memcpy(out + dmin4K(sb), dmin, sizeof(dmin));
  }
}

void pack_group_q6_K(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ6_K zero{};
  const int64_t nsb = w.n_in / kQKK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ6_K), reinterpret_cast<const uint8_t*>(&zero));
  for (int64_t sb = 0; sb < nsb; ++sb) {
    uint16_t d[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(rows.row[r] + size_t(sb) * rows.step[r]);
      int8_t q[kQKK];
      quant_ref::unpack_q6_K(blk, q);  // q - 32
      auto u = [&](int e) { return uint8_t(q[e] + 32); };
      for (int wv = 0; wv < 32; ++wv) {
        for (int k = 0; k < 4; ++k) {
          out[ql6K(sb, wv) + 4 * r + k] = uint8_t((u(8 * wv + k) & 0x0F) | (u(8 * wv + 4 + k) & 0x0F) << 4);
        }
      }
      for (int sub = 0; sub < 16; ++sub) {
        for (int k = 0; k < 4; ++k) {
          uint8_t byte = 0;
          for (int m = 0; m < 4; ++m) byte |= uint8_t((u(16 * sub + 4 * m + k) >> 4) << (2 * m));
          out[qh6K(sb, sub) + 4 * r + k] = byte;
        }
        out[sc6K(sb, sub) + 2 * r] = out[sc6K(sb, sub) + 2 * r + 1] = uint8_t(blk->scales[sub]);
        out[scp6K(sb, sub / 2) + 2 * r + sub % 2] = uint8_t(blk->scales[sub]);
      }
      d[r] = blk->d;
    }
    std::memcpy(out + d6K(sb), d, sizeof(d));
  }
}

void pack_group_q8_0(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ8_0 zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ8_0), reinterpret_cast<const uint8_t*>(&zero));
  if (nb % 2 != 0) std::memset(out + qs80(nb), 0, kPair80 / 2);  // the unused half pair
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0* blk[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const BlockQ8_0*>(rows.row[r] + size_t(b) * rows.step[r]);
    }
    // dwords 0-3 and 4-7 of the 8 rows, as two 4x8 transposes
    for (int half = 0; half < 2; ++half) {
      __m256i v[4], o[4];
      for (int p = 0; p < 4; ++p) {
        v[p] = _mm256_set_m128i(load128(blk[p + 4]->qs + 16 * half), load128(blk[p]->qs + 16 * half));
      }
      transpose_4x8(v, o);
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + qs80(b) + 32 * (4 * half + i)), o[i]);
      }
    }
    uint16_t d[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) d[r] = blk[r]->d;
    std::memcpy(out + sc80(b), d, sizeof(d));
  }
}

// --------------------------------------------------------------- kernels

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

// One group x T tokens. Per block, the 8 maddubs products of a token are
// summed in int16 (each |pair| <= 2 * 15 * 127, 8 of them <= 30480: exact).
template <int T>
void kernel_q4_1(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride,
                 int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs41(b);
    for (int l = 0; l < 3; ++l) prefetch(q + 64 * l);
    __m256i s16[T];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
      const __m256i wq = load256(q + 32 * i);
      const __m256i lo = _mm256_and_si256(wq, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4);
      for (int t = 0; t < T; ++t) {
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast32(a.qs[t] + 4 * i)),
                                           _mm256_maddubs_epi16(hi, bcast32(a.qs[t] + 16 + 4 * i)));
        s16[t] = i == 0 ? p : _mm256_add_epi16(s16[t], p);
        keep_in_register(s16[t]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(group + sc41(b)));
    const __m256 mw = _mm256_cvtph_ps(load128(group + sc41(b) + 16));
    for (int t = 0; t < T; ++t) {
      const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[t], ones));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d[t])), isum, acc[t]);
      acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(&a.s[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// A Q4_1 group's quants expanded to one byte per element, once per group,
// for the many-token path: per block b, 256 bytes: for i in 0..3, the low
// nibbles of qs[i] (32 bytes) then its high nibbles. Same lanes as qs[i].
constexpr size_t kUnpacked41 = 256;

void unpack_group_q4_1(const uint8_t* group, int64_t nb, uint8_t* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = group + qs41(b);
    uint8_t* o = out + size_t(b) * kUnpacked41;
    for (int i = 0; i < 4; ++i) {
      const __m256i wq = load256(q + 32 * i);
      _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 * i), _mm256_and_si256(wq, m4));
      _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 * i + 32),
                         _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4));
    }
  }
}

#ifndef OMNIBUS_UNPACKED_BARRIER
#define OMNIBUS_UNPACKED_BARRIER 1
#endif
constexpr bool kUnpackedBarrier = OMNIBUS_UNPACKED_BARRIER;

// kernel_q4_1 on a group unpacked by unpack_group_q4_1 (scales still read
// from the packed group): the nibble split is paid once per group instead of
// once per token tile, and T may reach 2 * kTok (tokens t >= kTok come from
// act1). Per output the same integer sums and the same float operations in the
// same order as kernel_q4_1: bitwise equal.
template <int T>
void kernel_q4_1_unpacked(const uint8_t* unpacked, const uint8_t* group, int64_t nb,
                          const void* act0_v, const void* act1_v, float* y, int64_t y_stride,
                          int n_rows) {
  const auto* act0 = static_cast<const ActBlock32*>(act0_v);
  const auto* act1 = static_cast<const ActBlock32*>(act1_v);
  static_assert(T >= 1 && T <= 2 * kTok);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a0 = act0[b];
    const ActBlock32& a1 = act1[T > kTok ? b : 0];
    const uint8_t* u = unpacked + size_t(b) * kUnpacked41;
    __m256i s16[T];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; ++i) {
      const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(u + 64 * i));
      const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(u + 64 * i + 32));
      for (int t = 0; t < T; ++t) {
        const int8_t* aq = t < kTok ? a0.qs[t] : a1.qs[t - kTok];
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast32(aq + 4 * i)),
                                           _mm256_maddubs_epi16(hi, bcast32(aq + 16 + 4 * i)));
        s16[t] = i == 0 ? p : _mm256_add_epi16(s16[t], p);
        if constexpr (kUnpackedBarrier) keep_in_register(s16[t]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(group + sc41(b)));
    const __m256 mw = _mm256_cvtph_ps(load128(group + sc41(b) + 16));
    for (int t = 0; t < T; ++t) {
      const float* da = t < kTok ? &a0.d[t] : &a1.d[t - kTok];
      const float* sa = t < kTok ? &a0.s[t] : &a1.s[t - kTok];
      const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[t], ones));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(da)), isum, acc[t]);
      acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(sa), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// kernel_q4_1_unpacked on two groups of one matrix at once (rows 0-7 from
// u0 / group0, rows 8-15 from u1 / group1, n_rows1 of them valid) and T <=
// kTok tokens of one tile: each activation broadcast feeds both groups, half
// the broadcasts per multiply of the one-group kernel (~20% faster on Zen 3).
// Per output the same integer sums and float operations in the same order:
// bitwise equal to kernel_q4_1_unpacked and kernel_q4_1.
template <int T>
void kernel_q4_1_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                               const uint8_t* group1, int64_t nb, const void* act_v, float* y,
                               int64_t y_stride, int n_rows1) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  static_assert(T >= 1 && T <= kTok);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* v0 = u0 + size_t(b) * kUnpacked41;
    const uint8_t* v1 = u1 + size_t(b) * kUnpacked41;
    __m256i s0[T], s1[T];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256i lo0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v0 + 64 * i));
      const __m256i hi0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v0 + 64 * i + 32));
      const __m256i lo1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v1 + 64 * i));
      const __m256i hi1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v1 + 64 * i + 32));
      for (int t = 0; t < T; ++t) {
        const __m256i al = bcast32(a.qs[t] + 4 * i), ah = bcast32(a.qs[t] + 16 + 4 * i);
        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, al), _mm256_maddubs_epi16(hi0, ah));
        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, al), _mm256_maddubs_epi16(hi1, ah));
        s0[t] = i == 0 ? p0 : _mm256_add_epi16(s0[t], p0);
        s1[t] = i == 0 ? p1 : _mm256_add_epi16(s1[t], p1);
        if constexpr (kUnpackedBarrier) {
          keep_in_register(s0[t]);
          keep_in_register(s1[t]);
        }
      }
    }
    const __m256 dw0 = _mm256_cvtph_ps(load128(group0 + sc41(b)));
    const __m256 mw0 = _mm256_cvtph_ps(load128(group0 + sc41(b) + 16));
    const __m256 dw1 = _mm256_cvtph_ps(load128(group1 + sc41(b)));
    const __m256 mw1 = _mm256_cvtph_ps(load128(group1 + sc41(b) + 16));
    for (int t = 0; t < T; ++t) {
      const __m256 da = _mm256_broadcast_ss(&a.d[t]), sa = _mm256_broadcast_ss(&a.s[t]);
      const __m256 isum0 = _mm256_cvtepi32_ps(_mm256_madd_epi16(s0[t], ones));
      const __m256 isum1 = _mm256_cvtepi32_ps(_mm256_madd_epi16(s1[t], ones));
      acc0[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw0, da), isum0, acc0[t]);
      acc0[t] = _mm256_fmadd_ps(mw0, sa, acc0[t]);
      acc1[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw1, da), isum1, acc1[t]);
      acc1[t] = _mm256_fmadd_ps(mw1, sa, acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    store_rows(y + t * y_stride, acc0[t], kGroupRows);
    store_rows(y + t * y_stride + kGroupRows, acc1[t], n_rows1);
  }
}

using UnpackedKernelFn = void (*)(const uint8_t*, const uint8_t*, int64_t, const void*, const void*, float*,
                                  int64_t, int);

#ifndef OMNIBUS_UNPACKED_TOK
#define OMNIBUS_UNPACKED_TOK 8
#endif
// Tokens per call of the unpacked kernel (<= 2 * kTok).
constexpr int kUnpackedTok = OMNIBUS_UNPACKED_TOK;


// ----------------------------------------------------------------- Q5_0
// Unsigned quants u = q + 16 in [0, 31] (nibble | fifth bit << 4), so
// maddubs(u, a) needs no sign trick; the exact block sum is then
//   sum (u - 16) * a = sum u * a - 16 * sum a      (sum a: ActBlock32::qsum)
// Two steps of maddubs pairs add up in int16 (|pair| <= 2 * 31 * 127, four of
// them <= 31496: exact) before widening.

// The fifth bits of step i's low (p = 2i) or high (p = 2i + 1) nibbles, as
// 0x10 per byte (16-bit shifts: the bits crossing a byte boundary never land
// on bit 4).
template <int P>
inline __m256i fifth_bits(__m256i hb) {
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  if constexpr (P <= 4) return _mm256_and_si256(_mm256_slli_epi16(hb, 4 - P), bit4);
  else return _mm256_and_si256(_mm256_srli_epi16(hb, P - 4), bit4);
}

// Step i's unsigned quants of a packed Q5_0 block: low and high halves.
template <int I>
inline void q5_0_step(const uint8_t* q, __m256i hb, __m256i* lo, __m256i* hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i wq = load256(q + 32 * I);
  *lo = _mm256_or_si256(_mm256_and_si256(wq, m4), fifth_bits<2 * I>(hb));
  *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wq, 4), m4), fifth_bits<2 * I + 1>(hb));
}

// acc = fma(d_w * d_a, float(isum), acc) with isum = widened s16 halves - 16 * sum a.
inline __m256 q5_0_block_acc(__m256i s32, int32_t qsum, __m256 dw, const float* da, __m256 acc) {
  const __m256i isum = _mm256_sub_epi32(s32, _mm256_set1_epi32(16 * qsum));
  return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(da)), _mm256_cvtepi32_ps(isum), acc);
}

// One packed group x T tokens (the nibbles and fifth bits merged per token
// tile: the decode path).
template <int T>
void kernel_q5_0(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride,
                 int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs50(b);
    for (int l = 0; l < 3; ++l) prefetch(q + 64 * l);
    const __m256i hb = load256(group + hb50(b));
    __m256i s32[T];
    auto half = [&]<int I0>() {
      __m256i lo0, hi0, lo1, hi1;
      q5_0_step<I0>(q, hb, &lo0, &hi0);
      q5_0_step<I0 + 1>(q, hb, &lo1, &hi1);
      for (int t = 0; t < T; ++t) {
        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, bcast32(a.qs[t] + 4 * I0)),
                                     _mm256_maddubs_epi16(hi0, bcast32(a.qs[t] + 16 + 4 * I0)));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo1, bcast32(a.qs[t] + 4 * I0 + 4)));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi1, bcast32(a.qs[t] + 20 + 4 * I0)));
        const __m256i w = _mm256_madd_epi16(p, ones);
        s32[t] = I0 == 0 ? w : _mm256_add_epi32(s32[t], w);
        keep_in_register(s32[t]);
      }
    };
    half.template operator()<0>();
    half.template operator()<2>();
    const __m256 dw = _mm256_cvtph_ps(load128(group + sc50(b)));
    for (int t = 0; t < T; ++t) acc[t] = q5_0_block_acc(s32[t], a.qsum[t], dw, &a.d[t], acc[t]);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// A Q5_0 group's unsigned quants, one byte per element, once per group for
// the many-token path: the layout of unpack_group_q4_1 (kUnpacked41 bytes
// per block).
void unpack_group_q5_0(const uint8_t* group, int64_t nb, uint8_t* out);

// kernel_q5_0 on two groups unpacked by unpack_group_q5_0 (rows 8-15 from u1
// / group1, n_rows1 of them valid), T <= kTok tokens: each activation
// broadcast feeds both groups. Same integer sums and float operations in the
// same order per output: bitwise equal to kernel_q5_0.
template <int T>
void kernel_q5_0_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                               const uint8_t* group1, int64_t nb, const void* act_v, float* y,
                               int64_t y_stride, int n_rows1) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  static_assert(T >= 1 && T <= kTok);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* v0 = u0 + size_t(b) * kUnpacked41;
    const uint8_t* v1 = u1 + size_t(b) * kUnpacked41;
    __m256i s0[T], s1[T], w0[T], w1[T];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256i lo0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v0 + 64 * i));
      const __m256i hi0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v0 + 64 * i + 32));
      const __m256i lo1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v1 + 64 * i));
      const __m256i hi1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v1 + 64 * i + 32));
      for (int t = 0; t < T; ++t) {
        const __m256i al = bcast32(a.qs[t] + 4 * i), ah = bcast32(a.qs[t] + 16 + 4 * i);
        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, al), _mm256_maddubs_epi16(hi0, ah));
        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, al), _mm256_maddubs_epi16(hi1, ah));
        if (i % 2 == 0) {
          w0[t] = p0;
          w1[t] = p1;
        } else {  // widen every two steps
          const __m256i x0 = _mm256_madd_epi16(_mm256_add_epi16(w0[t], p0), ones);
          const __m256i x1 = _mm256_madd_epi16(_mm256_add_epi16(w1[t], p1), ones);
          s0[t] = i == 1 ? x0 : _mm256_add_epi32(s0[t], x0);
          s1[t] = i == 1 ? x1 : _mm256_add_epi32(s1[t], x1);
        }
        if constexpr (kUnpackedBarrier) {
          keep_in_register(i % 2 == 0 ? w0[t] : s0[t]);
          keep_in_register(i % 2 == 0 ? w1[t] : s1[t]);
        }
      }
    }
    const __m256 dw0 = _mm256_cvtph_ps(load128(group0 + sc50(b)));
    const __m256 dw1 = _mm256_cvtph_ps(load128(group1 + sc50(b)));
    for (int t = 0; t < T; ++t) {
      acc0[t] = q5_0_block_acc(s0[t], a.qsum[t], dw0, &a.d[t], acc0[t]);
      acc1[t] = q5_0_block_acc(s1[t], a.qsum[t], dw1, &a.d[t], acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    store_rows(y + t * y_stride, acc0[t], kGroupRows);
    store_rows(y + t * y_stride + kGroupRows, acc1[t], n_rows1);
  }
}

void unpack_group_q5_0(const uint8_t* group, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = group + qs50(b);
    const __m256i hb = load256(group + hb50(b));
    auto* o = reinterpret_cast<__m256i*>(out + size_t(b) * kUnpacked41);
    __m256i lo, hi;
    q5_0_step<0>(q, hb, &lo, &hi);
    _mm256_store_si256(o + 0, lo);
    _mm256_store_si256(o + 1, hi);
    q5_0_step<1>(q, hb, &lo, &hi);
    _mm256_store_si256(o + 2, lo);
    _mm256_store_si256(o + 3, hi);
    q5_0_step<2>(q, hb, &lo, &hi);
    _mm256_store_si256(o + 4, lo);
    _mm256_store_si256(o + 5, hi);
    q5_0_step<3>(q, hb, &lo, &hi);
    _mm256_store_si256(o + 6, lo);
    _mm256_store_si256(o + 7, hi);
  }
}

// ----------------------------------------------------------------- Q4_K
// Per output, over super-blocks in order (acc = mins = 0):
//   isum = exact int32 sum_j sc_j * sum_{k in sub-block j} q[k] * a[k]
//   msum = exact int32 sum_j m_j * (a's sum over sub-block j)
//   acc  = fma(d * d_a, float(isum), acc);  mins = fma(dmin * d_a, float(msum), mins)
// and y = acc - mins: quant_avx2's vec_dot_q4_K. A sub-block's 8 maddubs
// add up in int16 as Q4_1's (<= 30480), then one madd applies its scale.

// msum of T tokens for one group super-block (mn: the 4 widened min pairs).
template <int T>
inline void q4_K_msum(const uint8_t* group, int64_t sb, const ActBlockK& a, __m256i ms[T]) {
  __m256i mv[4];
  for (int k = 0; k < 4; ++k) mv[k] = _mm256_cvtepu8_epi16(load128(group + mn4K(sb, k)));
  for (int t = 0; t < T; ++t) {
    __m256i m = _mm256_madd_epi16(mv[0], bcast32(reinterpret_cast<const int8_t*>(&a.bsum_pairs[t][0])));
    for (int k = 1; k < 4; ++k) {
      m = _mm256_add_epi32(
          m, _mm256_madd_epi16(mv[k], bcast32(reinterpret_cast<const int8_t*>(&a.bsum_pairs[t][2 * k]))));
    }
    ms[t] = m;
  }
}

template <int T>
inline void q4_K_finish(const uint8_t* group, int64_t sb, const ActBlockK& a, const __m256i isum[T],
                        const __m256i ms[T], __m256 acc[T], __m256 mins[T]) {
  const __m256 d = _mm256_cvtph_ps(load128(group + d4K(sb)));
  const __m256 dm = _mm256_cvtph_ps(load128(group + dmin4K(sb)));
  for (int t = 0; t < T; ++t) {
    const __m256 da = _mm256_broadcast_ss(&a.d[t]);
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(isum[t]), acc[t]);
    mins[t] = _mm256_fmadd_ps(_mm256_mul_ps(dm, da), _mm256_cvtepi32_ps(ms[t]), mins[t]);
  }
}

// One packed group x T tokens (nibbles split per token tile: the decode path).
template <int T>
void kernel_q4_K(const uint8_t* group, int64_t nsb, const void* act_v, float* y, int64_t y_stride,
                 int n_rows) {
  const auto* act = static_cast<const ActBlockK*>(act_v);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[T], mins[T];
  for (int t = 0; t < T; ++t) acc[t] = mins[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    __m256i isum[T];
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = group + qs4K(sb, j);
      for (int l = 0; l < 2; ++l) prefetch(q + 64 * l);
      __m256i s16[T];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m256i wq = load256(q + 32 * i);
        const __m256i lo = _mm256_and_si256(wq, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4);
        for (int t = 0; t < T; ++t) {
          const int8_t* aq = a.qs[t] + 32 * j + 4 * i;
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast32(aq)),
                                             _mm256_maddubs_epi16(hi, bcast32(aq + 16)));
          s16[t] = i == 0 ? p : _mm256_add_epi16(s16[t], p);
          keep_in_register(s16[t]);
        }
      }
      const __m256i scv = _mm256_cvtepu8_epi16(load128(group + sc4K(sb, j)));
      for (int t = 0; t < T; ++t) {
        const __m256i w = _mm256_madd_epi16(s16[t], scv);
        isum[t] = j == 0 ? w : _mm256_add_epi32(isum[t], w);
      }
    }
    __m256i ms[T];
    q4_K_msum<T>(group, sb, a, ms);
    q4_K_finish<T>(group, sb, a, isum, ms, acc, mins);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, _mm256_sub_ps(acc[t], mins[t]), n_rows);
}

// A Q4_K group's quants one byte per element (per super-block, 8 sub-blocks
// in unpack_group_q4_1's per-block layout: 2048 bytes).
void unpack_group_q4_K(const uint8_t* group, int64_t nsb, uint8_t* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = group + qs4K(sb, j);
      uint8_t* o = out + (size_t(sb) * 8 + size_t(j)) * kUnpacked41;
      for (int i = 0; i < 4; ++i) {
        const __m256i wq = load256(q + 32 * i);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 * i), _mm256_and_si256(wq, m4));
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 * i + 32),
                           _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4));
      }
    }
  }
}

// kernel_q4_K on two groups unpacked by unpack_group_q4_K (rows 8-15 from u1
// / group1, n_rows1 valid), T <= kTok tokens: each activation broadcast feeds
// both groups. Same operations per output: bitwise equal to kernel_q4_K.
template <int T>
void kernel_q4_K_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                               const uint8_t* group1, int64_t nsb, const void* act_v, float* y,
                               int64_t y_stride, int n_rows1) {
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlockK*>(act_v);
  __m256 acc0[T], acc1[T], mins0[T], mins1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = mins0[t] = mins1[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    __m256i isum0[T], isum1[T];
    for (int j = 0; j < 8; ++j) {
      const uint8_t* v0 = u0 + (size_t(sb) * 8 + size_t(j)) * kUnpacked41;
      const uint8_t* v1 = u1 + (size_t(sb) * 8 + size_t(j)) * kUnpacked41;
      __m256i s0[T], s1[T];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m256i lo0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v0 + 64 * i));
        const __m256i hi0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v0 + 64 * i + 32));
        const __m256i lo1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v1 + 64 * i));
        const __m256i hi1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(v1 + 64 * i + 32));
        for (int t = 0; t < T; ++t) {
          const int8_t* aq = a.qs[t] + 32 * j + 4 * i;
          const __m256i al = bcast32(aq), ah = bcast32(aq + 16);
          const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo0, al), _mm256_maddubs_epi16(hi0, ah));
          const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo1, al), _mm256_maddubs_epi16(hi1, ah));
          s0[t] = i == 0 ? p0 : _mm256_add_epi16(s0[t], p0);
          s1[t] = i == 0 ? p1 : _mm256_add_epi16(s1[t], p1);
          if constexpr (kUnpackedBarrier) {
            keep_in_register(s0[t]);
            keep_in_register(s1[t]);
          }
        }
      }
      const __m256i sc0 = _mm256_cvtepu8_epi16(load128(group0 + sc4K(sb, j)));
      const __m256i sc1 = _mm256_cvtepu8_epi16(load128(group1 + sc4K(sb, j)));
      for (int t = 0; t < T; ++t) {
        const __m256i w0 = _mm256_madd_epi16(s0[t], sc0), w1 = _mm256_madd_epi16(s1[t], sc1);
        isum0[t] = j == 0 ? w0 : _mm256_add_epi32(isum0[t], w0);
        isum1[t] = j == 0 ? w1 : _mm256_add_epi32(isum1[t], w1);
      }
    }
    __m256i ms[T];
    q4_K_msum<T>(group0, sb, a, ms);
    q4_K_finish<T>(group0, sb, a, isum0, ms, acc0, mins0);
    q4_K_msum<T>(group1, sb, a, ms);
    q4_K_finish<T>(group1, sb, a, isum1, ms, acc1, mins1);
  }
  for (int t = 0; t < T; ++t) {
    store_rows(y + t * y_stride, _mm256_sub_ps(acc0[t], mins0[t]), kGroupRows);
    store_rows(y + t * y_stride + kGroupRows, _mm256_sub_ps(acc1[t], mins1[t]), n_rows1);
  }
}

// ----------------------------------------------------------------- Q6_K
// Per output, over super-blocks in order (acc = 0):
//   isum = exact int32 sum_s sc_s * sum_{k in sub-block s} (q[k] - 32) * a[k]
//        = sum_s sc_s * sum q[k] a[k] - 32 * sum_s sc_s * bsum_s
//   acc  = fma(d * d_a, float(isum), acc)
// (quant_avx2's vec_dot_q6_K). Unpacked vector v of a super-block holds
// elements 4v..4v+3 of the 8 rows; sub-block s is vectors 4s..4s+3. Two
// vectors' maddubs add up in int16 (|pair| <= 2 * 63 * 127, two <= 32004)
// before the sub-block's scale is applied by madd.

// The top two bits of unpacked vector 4s + M, as bits 4-5 of each byte
// (16-bit shifts: what crosses a byte boundary never reaches bits 4-5).
template <int M>
inline __m256i q6_top_bits(__m256i qh) {
  const __m256i m30 = _mm256_set1_epi8(0x30);
  if constexpr (M <= 2) return _mm256_and_si256(_mm256_slli_epi16(qh, 4 - 2 * M), m30);
  else return _mm256_and_si256(_mm256_srli_epi16(qh, 2 * M - 4), m30);
}

// Unpacked vectors 4s + 2M and 4s + 2M + 1 of a packed Q6_K super-block.
template <int M>
inline void q6_K_vectors(const uint8_t* group, int64_t sb, int s, __m256i qh, __m256i* v0, __m256i* v1) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i wq = load256(group + ql6K(sb, 2 * s + M));
  *v0 = _mm256_or_si256(_mm256_and_si256(wq, m4), q6_top_bits<2 * M>(qh));
  *v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wq, 4), m4), q6_top_bits<2 * M + 1>(qh));
}

// isum -= 32 * sum_s sc_s * bsum_s, for T tokens.
template <int T>
inline void q6_K_offset(const uint8_t* group, int64_t sb, const ActBlockK& a, __m256i isum[T]) {
  __m256i corr[T];
  for (int k = 0; k < 8; ++k) {
    const __m256i scp = _mm256_cvtepi8_epi16(load128(group + scp6K(sb, k)));
    for (int t = 0; t < T; ++t) {
      const __m256i c = _mm256_madd_epi16(scp, bcast32(reinterpret_cast<const int8_t*>(&a.bsums[t][2 * k])));
      corr[t] = k == 0 ? c : _mm256_add_epi32(corr[t], c);
    }
  }
  for (int t = 0; t < T; ++t) isum[t] = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr[t], 5));
}

// One packed group x T tokens (quants merged per token tile: the decode path).
template <int T>
void kernel_q6_K(const uint8_t* group, int64_t nsb, const void* act_v, float* y, int64_t y_stride,
                 int n_rows) {
  const auto* act = static_cast<const ActBlockK*>(act_v);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    __m256i isum[T];
    for (int s = 0; s < 16; ++s) {
      if (s % 2 == 0) prefetch(group + ql6K(sb, 2 * s));
      const __m256i qh = load256(group + qh6K(sb, s));
      const __m256i scv = _mm256_cvtepi8_epi16(load128(group + sc6K(sb, s)));
      __m256i v[4];
      q6_K_vectors<0>(group, sb, s, qh, &v[0], &v[1]);
      q6_K_vectors<1>(group, sb, s, qh, &v[2], &v[3]);
      for (int t = 0; t < T; ++t) {
        const int8_t* aq = a.qs[t] + 16 * s;
        const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], bcast32(aq)),
                                            _mm256_maddubs_epi16(v[1], bcast32(aq + 4)));
        const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], bcast32(aq + 8)),
                                            _mm256_maddubs_epi16(v[3], bcast32(aq + 12)));
        const __m256i w = _mm256_add_epi32(_mm256_madd_epi16(p0, scv), _mm256_madd_epi16(p1, scv));
        isum[t] = s == 0 ? w : _mm256_add_epi32(isum[t], w);
      }
    }
    q6_K_offset<T>(group, sb, a, isum);
    const __m256 d = _mm256_cvtph_ps(load128(group + d6K(sb)));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_broadcast_ss(&a.d[t])), _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// A Q6_K group's quants one byte per element: per super-block the 64
// unpacked vectors in order (2048 bytes).
void unpack_group_q6_K(const uint8_t* group, int64_t nsb, uint8_t* out) {
  for (int64_t sb = 0; sb < nsb; ++sb) {
    auto* o = reinterpret_cast<__m256i*>(out + size_t(sb) * 2048);
    for (int s = 0; s < 16; ++s) {
      const __m256i qh = load256(group + qh6K(sb, s));
      __m256i v[4];
      q6_K_vectors<0>(group, sb, s, qh, &v[0], &v[1]);
      q6_K_vectors<1>(group, sb, s, qh, &v[2], &v[3]);
      for (int m = 0; m < 4; ++m) _mm256_store_si256(o + 4 * s + m, v[m]);
    }
  }
}

// kernel_q6_K on two groups unpacked by unpack_group_q6_K (rows 8-15 from u1
// / group1, n_rows1 valid), T <= kTok tokens: each activation broadcast feeds
// both groups. Same operations per output: bitwise equal to kernel_q6_K.
template <int T>
void kernel_q6_K_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                               const uint8_t* group1, int64_t nsb, const void* act_v, float* y,
                               int64_t y_stride, int n_rows1) {
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlockK*>(act_v);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    const auto* x0 = reinterpret_cast<const __m256i*>(u0 + size_t(sb) * 2048);
    const auto* x1 = reinterpret_cast<const __m256i*>(u1 + size_t(sb) * 2048);
    __m256i isum0[T], isum1[T];
    for (int s = 0; s < 16; ++s) {
      const __m256i sc0 = _mm256_cvtepi8_epi16(load128(group0 + sc6K(sb, s)));
      const __m256i sc1 = _mm256_cvtepi8_epi16(load128(group1 + sc6K(sb, s)));
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {  // vectors 4s + 2h, 4s + 2h + 1
        const __m256i a0 = _mm256_load_si256(x0 + 4 * s + 2 * h), b0 = _mm256_load_si256(x0 + 4 * s + 2 * h + 1);
        const __m256i a1 = _mm256_load_si256(x1 + 4 * s + 2 * h), b1 = _mm256_load_si256(x1 + 4 * s + 2 * h + 1);
        for (int t = 0; t < T; ++t) {
          const int8_t* aq = a.qs[t] + 16 * s + 8 * h;
          const __m256i al = bcast32(aq), ah = bcast32(aq + 4);
          const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(a0, al), _mm256_maddubs_epi16(b0, ah));
          const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(a1, al), _mm256_maddubs_epi16(b1, ah));
          const __m256i w0 = _mm256_madd_epi16(p0, sc0), w1 = _mm256_madd_epi16(p1, sc1);
          isum0[t] = s == 0 && h == 0 ? w0 : _mm256_add_epi32(isum0[t], w0);
          isum1[t] = s == 0 && h == 0 ? w1 : _mm256_add_epi32(isum1[t], w1);
          if constexpr (kUnpackedBarrier) {
            keep_in_register(isum0[t]);
            keep_in_register(isum1[t]);
          }
        }
      }
    }
    q6_K_offset<T>(group0, sb, a, isum0);
    q6_K_offset<T>(group1, sb, a, isum1);
    const __m256 d0 = _mm256_cvtph_ps(load128(group0 + d6K(sb)));
    const __m256 d1 = _mm256_cvtph_ps(load128(group1 + d6K(sb)));
    for (int t = 0; t < T; ++t) {
      const __m256 da = _mm256_broadcast_ss(&a.d[t]);
      acc0[t] = _mm256_fmadd_ps(_mm256_mul_ps(d0, da), _mm256_cvtepi32_ps(isum0[t]), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(_mm256_mul_ps(d1, da), _mm256_cvtepi32_ps(isum1[t]), acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    store_rows(y + t * y_stride, acc0[t], kGroupRows);
    store_rows(y + t * y_stride + kGroupRows, acc1[t], n_rows1);
  }
}

// Signed weights: |w| x (a with w's sign) per 4-byte lane (|pair| <= 2 * 128 * 127).
template <int T>
void kernel_q8_0(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride,
                 int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs80(b);
    for (int l = 0; l < 5; ++l) prefetch(group + size_t(b) * (kPair80 / 2) + 64 * l);
    __m256i s32[T];
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i wq = load256(q + 32 * j);
      const __m256i uw = _mm256_sign_epi8(wq, wq);
      for (int t = 0; t < T; ++t) {
        const __m256i p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(uw, _mm256_sign_epi8(bcast32(a.qs[t] + 4 * j), wq)), ones);
        s32[t] = j == 0 ? p : _mm256_add_epi32(s32[t], p);
        keep_in_register(s32[t]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(group + sc80(b)));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d[t])),
                               _mm256_cvtepi32_ps(s32[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// kernel_q8_0 on two groups at once (rows 8-15 from group1, n_rows1 valid),
// for many-token calls: each activation broadcast feeds both groups. Per
// output the same operations in the same order: bitwise equal to kernel_q8_0.
template <int T>
void kernel_q8_0_pair(const uint8_t* group0, const uint8_t* group1, int64_t nb, const void* act_v,
                      float* y, int64_t y_stride, int n_rows1) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  static_assert(T >= 1 && T <= kTok);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q0 = group0 + qs80(b);
    const uint8_t* q1 = group1 + qs80(b);
    __m256i s0[T], s1[T];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i wq0 = load256(q0 + 32 * j), wq1 = load256(q1 + 32 * j);
      const __m256i uw0 = _mm256_sign_epi8(wq0, wq0), uw1 = _mm256_sign_epi8(wq1, wq1);
      for (int t = 0; t < T; ++t) {
        const __m256i av = bcast32(a.qs[t] + 4 * j);
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(uw0, _mm256_sign_epi8(av, wq0)), ones);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(uw1, _mm256_sign_epi8(av, wq1)), ones);
        s0[t] = j == 0 ? p0 : _mm256_add_epi32(s0[t], p0);
        s1[t] = j == 0 ? p1 : _mm256_add_epi32(s1[t], p1);
        keep_in_register(s0[t]);
        keep_in_register(s1[t]);
      }
    }
    const __m256 dw0 = _mm256_cvtph_ps(load128(group0 + sc80(b)));
    const __m256 dw1 = _mm256_cvtph_ps(load128(group1 + sc80(b)));
    for (int t = 0; t < T; ++t) {
      const __m256 da = _mm256_broadcast_ss(&a.d[t]);
      acc0[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw0, da), _mm256_cvtepi32_ps(s0[t]), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw1, da), _mm256_cvtepi32_ps(s1[t]), acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    store_rows(y + t * y_stride, acc0[t], kGroupRows);
    store_rows(y + t * y_stride + kGroupRows, acc1[t], n_rows1);
  }
}

// Kernels take the activation tile as void*: ActBlock32[nb] (32-element
// formats) or ActBlockK[nb] (K-quants), per Ops::k_act.
using PairFn = void (*)(const uint8_t*, const uint8_t*, int64_t, const void*, float*, int64_t, int);
using KernelFn = void (*)(const uint8_t*, int64_t, const void*, float*, int64_t, int);
using PackFn = void (*)(const WeightView&, int64_t, uint8_t*);
using UnpackFn = void (*)(const uint8_t*, int64_t, uint8_t*);
using UnpackedPairFn = void (*)(const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, int64_t,
                                const void*, float*, int64_t, int);

// A packed type's kernels. Calls with several token tiles take the first of:
// unpack (quants split to bytes once per group; upair for two groups, else
// unpacked_single if any, else kernel), then pair, then kernel.
struct Ops {
  KernelFn kernel[kTok + 1];  // one packed group, T tokens
  PackFn pack;
  bool with_sum;              // Q8_1 activations
  PairFn pair[kTok + 1];      // two packed groups per call (null: none for this type)
  UnpackFn unpack;            // null: no unpacked path
  UnpackedPairFn upair[kTok + 1];
  UnpackedKernelFn unpacked_single[2 * kTok + 1];  // null: kernel on the packed group
  bool k_act = false;         // ActBlockK (Q8_K, 256-element) activation tiles, else ActBlock32
};

const Ops& ops_for(DType type) {
  static const Ops q4_1{{nullptr, kernel_q4_1<1>, kernel_q4_1<2>, kernel_q4_1<3>, kernel_q4_1<4>},
                        pack_group_q4_1,
                        true,
                        {},
                        unpack_group_q4_1,
                        {nullptr, kernel_q4_1_unpacked_pair<1>, kernel_q4_1_unpacked_pair<2>,
                         kernel_q4_1_unpacked_pair<3>, kernel_q4_1_unpacked_pair<4>},
                        {nullptr, kernel_q4_1_unpacked<1>, kernel_q4_1_unpacked<2>, kernel_q4_1_unpacked<3>,
                         kernel_q4_1_unpacked<4>, kernel_q4_1_unpacked<5>, kernel_q4_1_unpacked<6>,
                         kernel_q4_1_unpacked<7>, kernel_q4_1_unpacked<8>}};
  static const Ops q8_0{{nullptr, kernel_q8_0<1>, kernel_q8_0<2>, kernel_q8_0<3>, kernel_q8_0<4>},
                        pack_group_q8_0,
                        false,
                        {nullptr, kernel_q8_0_pair<1>, kernel_q8_0_pair<2>, kernel_q8_0_pair<3>,
                         kernel_q8_0_pair<4>},
                        nullptr,
                        {},
                        {}};
  static const Ops q5_0{{nullptr, kernel_q5_0<1>, kernel_q5_0<2>, kernel_q5_0<3>, kernel_q5_0<4>},
                        pack_group_q5_0,
                        false,
                        {},
                        unpack_group_q5_0,
                        {nullptr, kernel_q5_0_unpacked_pair<1>, kernel_q5_0_unpacked_pair<2>,
                         kernel_q5_0_unpacked_pair<3>, kernel_q5_0_unpacked_pair<4>},
                        {}};
  static const Ops q4_K{{nullptr, kernel_q4_K<1>, kernel_q4_K<2>, kernel_q4_K<3>, kernel_q4_K<4>},
                        pack_group_q4_K,
                        false,
                        {},
                        unpack_group_q4_K,
                        {nullptr, kernel_q4_K_unpacked_pair<1>, kernel_q4_K_unpacked_pair<2>,
                         kernel_q4_K_unpacked_pair<3>, kernel_q4_K_unpacked_pair<4>},
                        {},
                        true};
  static const Ops q6_K{{nullptr, kernel_q6_K<1>, kernel_q6_K<2>, kernel_q6_K<3>, kernel_q6_K<4>},
                        pack_group_q6_K,
                        false,
                        {},
                        unpack_group_q6_K,
                        {nullptr, kernel_q6_K_unpacked_pair<1>, kernel_q6_K_unpacked_pair<2>,
                         kernel_q6_K_unpacked_pair<3>, kernel_q6_K_unpacked_pair<4>},
                        {},
                        true};
  switch (type) {
    case DType::Q4_1: return q4_1;
    case DType::Q6_K: return q6_K;
    case DType::Q8_0: return q8_0;
    case DType::Q5_0: return q5_0;
    case DType::Q4_K: return q4_K;
    default: OMNIBUS_CHECK(false && "no packed kernel for this type"); return q4_1;
  }
}

}  // namespace

bool has_packed_kernel(DType type) {
  switch (type) {
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

namespace {
int64_t block_elems(DType type) { return type == DType::Q4_K || type == DType::Q6_K ? kQKK : kQK; }
}  // namespace

size_t group_bytes(DType type, int64_t n_in) {
  return round_up(group_used_bytes(type, n_in / block_elems(type)), 64);
}

size_t packed_size(const WeightView& w) {
  const int64_t n_groups = (w.n_out + kGroupRows - 1) / kGroupRows;
  return size_t(n_groups) * group_bytes(w.type, w.n_in);
}

void pack_groups(const WeightView& w, int64_t g0, int64_t g1, uint8_t* out) {
  OMNIBUS_CHECK(has_packed_kernel(w.type) && w.n_in % block_elems(w.type) == 0);
  const Ops& ops = ops_for(w.type);
  const size_t gb = group_bytes(w.type, w.n_in);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + size_t(g - g0) * gb;
    ops.pack(w, g, dst);
    // zero the alignment padding so packed bytes are deterministic
    const size_t used = group_used_bytes(w.type, w.n_in / block_elems(w.type));
    std::memset(dst + used, 0, gb - used);
  }
}

void matmul(const WeightView& w, const uint8_t* packed, const float* x, int64_t n_tok, float* y,
            ThreadPool& pool, MatmulScratch& scratch) {
  const WeightView* ws[1] = {&w};
  const uint8_t* ps[1] = {packed};
  float* ys[1] = {y};
  matmul_multi(ws, ps, ys, 1, x, n_tok, pool, scratch);
}

void matmul_multi(const WeightView* const* ws, const uint8_t* const* packed, float* const* ys, int n_mats,
                  const float* x, int64_t n_tok, ThreadPool& pool, MatmulScratch& scratch) {
  OMNIBUS_CHECK(n_mats >= 1 && n_tok >= 1);
  const DType type = ws[0]->type;
  const int64_t n_in = ws[0]->n_in;
  OMNIBUS_CHECK(has_packed_kernel(type) && n_in % block_elems(type) == 0);
  // Group index space: matrix m's groups follow those of matrices 0..m-1.
  constexpr int kMaxMats = 4;
  OMNIBUS_CHECK(n_mats <= kMaxMats);
  int64_t first_group[kMaxMats + 1] = {0};
  for (int m = 0; m < n_mats; ++m) {
    OMNIBUS_CHECK(ws[m]->type == type && ws[m]->n_in == n_in);
    first_group[m + 1] = first_group[m] + (ws[m]->n_out + kGroupRows - 1) / kGroupRows;
  }
  const int64_t n_groups = first_group[n_mats];
  if (n_groups == 0) return;

  const Ops& ops = ops_for(type);
  const int64_t nb = n_in / block_elems(type);  // activation blocks per token
  const int64_t n_tiles = (n_tok + kTok - 1) / kTok;
  const size_t act_block = ops.k_act ? sizeof(ActBlockK) : sizeof(ActBlock32);
  const size_t act_bytes = size_t(n_tiles * nb) * act_block;
  if (scratch.quantized_x.size() < act_bytes) scratch.quantized_x.resize(act_bytes);
  uint8_t* act = scratch.quantized_x.data();
  // The activation tile `tile` (nb blocks).
  auto tile_act = [&](int64_t tile) -> const uint8_t* { return act + size_t(tile * nb) * act_block; };
  pool.parallel_for(n_tiles, [&](int64_t tile, int) {
    const int64_t n_valid = std::min<int64_t>(kTok, n_tok - tile * kTok);
    uint8_t* a = act + size_t(tile * nb) * act_block;
    if (ops.k_act) {
      matmul_avx2::quantize_tile_k(x + tile * kTok * n_in, n_in, n_valid, reinterpret_cast<ActBlockK*>(a));
    } else {
      matmul_avx2::quantize_tile(x + tile * kTok * n_in, n_in, n_valid, ops.with_sum,
                                 reinterpret_cast<ActBlock32*>(a));
    }
  });

  const size_t gb = group_bytes(type, n_in);
  const int n_threads = pool.n_threads();
  bool any_unpacked = false;
  for (int m = 0; m < n_mats; ++m) any_unpacked |= packed[m] == nullptr;
  uint8_t* pack_buf = nullptr;
  if (any_unpacked) {
    const size_t need = size_t(n_threads) * 2 * gb + 64;
    if (scratch.packed_rows.size() < need) scratch.packed_rows.resize(need);
    const auto addr = reinterpret_cast<uintptr_t>(scratch.packed_rows.data());
    pack_buf = scratch.packed_rows.data() + (round_up(addr, 64) - addr);
  }
  // Q4_1 / Q5_0 with more than one token tile: each group's quants are split
  // to bytes once (per-thread buffer) and shared by all its tiles.
  const bool unpack = ops.unpack != nullptr && n_tiles > 1;
  const size_t ub = size_t(n_in) * kGroupRows;  // one byte per element of a group
  uint8_t* unpack_buf = nullptr;
  if (unpack) {
    const size_t need = size_t(n_threads) * 2 * ub + 64;
    if (scratch.unpacked_rows.size() < need) scratch.unpacked_rows.resize(need);
    const auto addr = reinterpret_cast<uintptr_t>(scratch.unpacked_rows.data());
    unpack_buf = scratch.unpacked_rows.data() + (round_up(addr, 64) - addr);
  }
  static_assert(kUnpackedTok == kTok || kUnpackedTok == 2 * kTok);
  // The groups are cut into n_threads contiguous regions of n_sub runs
  // each; task t is run t / n_threads of region t % n_threads. Tasks are
  // claimed in order, so with threads at equal speed each one walks its own
  // region front to back: one prefetchable stream per thread, as a static
  // split, yet a descheduled (or slower) thread's runs are still taken by the
  // others. Runs are kept short (about kRunBlockTiles group-blocks x token
  // tiles, ~20 us, at least 4 per region) so that the last one, which nobody
  // can share, is short too. Which thread computes a group never changes its
  // result.
  constexpr int64_t kChunkTiles = 16;
  constexpr int64_t kRunBlockTiles = 1536, kMinSubtasks = 4, kMaxSubtasks = 64;
  const int64_t n_regions = std::min<int64_t>(n_threads, n_groups);
  const int64_t region_work = n_groups / n_regions * n_tiles * nb;
  const int64_t n_sub = std::clamp<int64_t>(region_work / kRunBlockTiles, kMinSubtasks, kMaxSubtasks);
  const int64_t n_tasks = n_regions * n_sub;
  pool.parallel_for(n_tasks, [&](int64_t task, int thread) {
    const int64_t region = task % n_regions, sub = task / n_regions;
    // Boundaries at even offsets, so that runs pair up their groups.
    auto cut = [](int64_t lo, int64_t hi, int64_t i, int64_t n) {
      return i == n ? hi : lo + (hi - lo) * i / n / 2 * 2;
    };
    const int64_t r0 = cut(0, n_groups, region, n_regions), r1 = cut(0, n_groups, region + 1, n_regions);
    const int64_t g0 = cut(r0, r1, sub, n_sub), g1 = cut(r0, r1, sub + 1, n_sub);
    // Group gg of the index space: its matrix, and its packed bytes (packed
    // on the fly into this thread's pack slot `slot` where not packed at load).
    auto matrix_of = [&](int64_t gg) {
      int mm = 0;
      while (gg >= first_group[mm + 1]) ++mm;
      return mm;
    };
    auto group_ptr = [&](int m, int64_t g, int slot) -> const uint8_t* {
      if (packed[m] != nullptr) return packed[m] + size_t(g) * gb;
      uint8_t* buf = pack_buf + (size_t(thread) * 2 + size_t(slot)) * gb;
      ops.pack(*ws[m], g, buf);
      return buf;
    };
    // The packed bytes of group gg where packed at load (else null).
    auto packed_addr = [&](int64_t gg) -> const uint8_t* {
      const int mm = matrix_of(gg);
      return packed[mm] == nullptr ? nullptr : packed[mm] + size_t(gg - first_group[mm]) * gb;
    };
    // Token tiles in chunks of kChunkTiles (64 tokens): a prompt-sized call
    // walks its run of groups once per chunk, so the chunk's activations (up
    // to 123 KB at n_in 1536) stay in L2 instead of streaming the whole
    // batch's from L3 for every group pair. Unpacking is redone per chunk.
    for (int64_t c0 = 0; c0 < n_tiles; c0 += kChunkTiles) {
      const int64_t c1 = std::min(n_tiles, c0 + kChunkTiles);
      for (int64_t gg = g0; gg < g1;) {
        const int m = matrix_of(gg);
        const WeightView& w = *ws[m];
        const int64_t g = gg - first_group[m];
        float* y = ys[m] + g * kGroupRows;
        const uint8_t* gp = group_ptr(m, g, 0);
        const int n_rows = int(std::min<int64_t>(kGroupRows, w.n_out - g * kGroupRows));
        if (!unpack && n_tiles > 1 && ops.pair[1] != nullptr && gg + 1 < g1 && gg + 1 < first_group[m + 1]) {
          // Many tiles of a type with a pair kernel: two groups per call.
          const uint8_t* gp1 = group_ptr(m, g + 1, 1);
          for (int64_t next = gg + 2; next < std::min(g1, gg + 4); ++next) prefetch_group(packed_addr(next), gb);
          const int n_rows1 = int(std::min<int64_t>(kGroupRows, w.n_out - (g + 1) * kGroupRows));
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.pair[T](gp, gp1, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out, n_rows1);
          }
          gg += 2;
          continue;
        }
        if (!unpack) {
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.kernel[T](gp, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out, n_rows);
          }
          ++gg;
          continue;
        }
        // Many tiles: split the nibbles once per group, and run two groups of
        // one matrix together where the run has them.
        const bool pair = gg + 1 < g1 && gg + 1 < first_group[m + 1];
        const int step = pair ? 2 : 1;
        uint8_t* ubuf = unpack_buf + size_t(thread) * 2 * ub;
        const bool single_unpacked = ops.unpacked_single[1] != nullptr;
        if (pair || single_unpacked) ops.unpack(gp, nb, ubuf);
        const uint8_t* gp1 = nullptr;
        if (pair) {
          gp1 = group_ptr(m, g + 1, 1);
          ops.unpack(gp1, nb, ubuf + ub);
        }
        // The next groups are read only after these ones' many token tiles:
        // bring them towards L2 now (a layer's weights come from DRAM).
        for (int64_t next = gg + step; next < std::min(g1, gg + 2 * step); ++next) {
          prefetch_group(packed_addr(next), gb);
        }
        if (pair) {
          const int n_rows1 = int(std::min<int64_t>(kGroupRows, w.n_out - (g + 1) * kGroupRows));
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.upair[T](ubuf, ubuf + ub, gp, gp1, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out,
                         n_rows1);
          }
        } else if (!single_unpacked) {
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.kernel[T](gp, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out, n_rows);
          }
        } else {
          constexpr int64_t tiles_per_call = kUnpackedTok / kTok;
          for (int64_t tile = c0; tile < c1; tile += tiles_per_call) {
            const int T = int(std::min<int64_t>({kUnpackedTok, n_tok - tile * kTok, (c1 - tile) * kTok}));
            const uint8_t* a0 = tile_act(tile);
            const uint8_t* a1 = T > kTok ? tile_act(tile + 1) : a0;
            ops.unpacked_single[T](ubuf, gp, nb, a0, a1, y + tile * kTok * w.n_out, w.n_out, n_rows);
          }
        }
        gg += step;
      }
    }
  });
}

}  // namespace omnibus::matmul_packed
