// Packed K-quants (matmul_packed_internal.h), per 256-element super-block,
// with Q8_K activations (ActBlockK):
//   Q4_K, 1184 bytes: for each sub-block j (32 elements), qs[4][8 rows][4
//         bytes] laid out as a Q4_1 block (low nibbles elements 32j+4i..,
//         high nibbles 32j+16+4i..; re-nibbled at load, so both halves of a
//         load share the sub-block's scale), then sc[8][8 rows] (the 6-bit
//         scales), mn[4][8 rows][2] (mins of sub-blocks 2k, 2k+1), half d[8],
//         half dmin[8].
//   Q5_K, 1440 bytes: for each sub-block j, qs as Q4_K's then hb[8 rows][4
//         bytes] (its fifth bits, laid out as a Q5_0 block's), then sc, mn,
//         d, dmin as Q4_K. Quants u = nibble | fifth bit << 4 in [0, 31].
//   Q6_K, 1680 bytes (as many as the 8 rows' blocks in the file):
//         ql[32][8 rows][4 bytes] (byte k of ql[w]: low nibble the low 4 bits
//         of element 8w+k, high nibble those of 8w+4+k), qh[16][8 rows][4
//         bytes] (byte k of qh[s]: bits 2m, 2m+1 the top 2 bits of element
//         16s+4m+k), sc[16][8 rows] (the int8 scale of sub-block s), half
//         d[8]. Quants are unsigned (q in [0, 63], value q - 32).
// The scales take one byte per row and sub-block (they took two, and Q6_K a
// second copy in pairs, before): decode reads every byte of a group once per
// token, so layout bytes beyond the file's are time at the bandwidth limit.
#include "kernels/matmul_packed_internal.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_ref.h"

namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER {
namespace {

// ------------------------------------------------------------ Q4_K, Q5_K

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
static_assert(LayoutQ4_K::kTail + 160 == LayoutQ4_K::kSuper && LayoutQ5_K::kTail + 160 == LayoutQ5_K::kSuper);
size_t used_bytes_q4_K(int64_t nsb) { return size_t(nsb) * LayoutQ4_K::kSuper; }
size_t used_bytes_q5_K(int64_t nsb) { return size_t(nsb) * LayoutQ5_K::kSuper; }

// Packs the shared tail of super-block sb of 8 rows (scales, mins, d, dmin;
// blk[r]: a BlockQ4_K or BlockQ5_K, which share these fields' layout).
template <class L, class Block>
void pack_k4_tail(const Block* const blk[kGroupRows], int64_t sb, uint8_t* out) {
  uint16_t d[kGroupRows], dmin[kGroupRows];
  for (int r = 0; r < kGroupRows; ++r) {
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, blk[r]->scales, &sc, &m);
      out[L::sc(sb, j) + r] = sc;
      out[L::mn(sb, j / 2) + 2 * r + j % 2] = m;
    }
    d[r] = blk[r]->d;
    dmin[r] = blk[r]->dmin;
  }
  std::memcpy(out + L::d(sb), d, sizeof(d));
  std::memcpy(out + L::dmin(sb), dmin, sizeof(dmin));
}

// Packs group g of Q4_K / Q5_K rows (Block: BlockQ4_K / BlockQ5_K, with L):
// each row's sub-blocks re-nibbled as Q4_1 blocks (byte k = q[k] | q[16 + k]
// << 4); for Q5_K also each sub-block's fifth bits (bit j of qh[l]: element
// 32j + l) packed as a Q5_0 block's hb.
template <class L, class Block>
void pack_k4(const WeightView& w, int64_t g, uint8_t* out) {
  static const Block zero{};
  const int64_t nsb = w.n_in / kQKK;
  const GroupRows rows = group_rows(w, g, sizeof(Block), reinterpret_cast<const uint8_t*>(&zero));
  for (int64_t sb = 0; sb < nsb; ++sb) {
    alignas(16) uint8_t q41[kGroupRows][8][16];
    uint8_t qh[kGroupRows][8][4];  // Q5_K, per sub-block: bit l = fifth bit of element l
    const Block* blk[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const Block*>(rows.row[r] + size_t(sb) * rows.step[r]);
      for (int j = 0; j < 8; ++j) {
        // sub-block j: the low (j even) or high nibbles of chunk j / 2
        const uint8_t* chunk = blk[r]->qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int k = 0; k < 16; ++k) {
          q41[r][j][k] = uint8_t(((chunk[k] >> shift) & 0x0F) | ((chunk[16 + k] >> shift) & 0x0F) << 4);
        }
        if constexpr (L::kFifth) {
          uint32_t bits = 0;
          for (int l = 0; l < 32; ++l) bits |= uint32_t((blk[r]->qh[l] >> j) & 1u) << l;
          std::memcpy(qh[r][j], &bits, 4);
        }
      }
    }
    for (int j = 0; j < 8; ++j) {
      const uint8_t *qs[kGroupRows], *hbits[kGroupRows];
      for (int r = 0; r < kGroupRows; ++r) qs[r] = q41[r][j], hbits[r] = qh[r][j];
      store_transposed_16(qs, out + L::qs(sb, j));
      if constexpr (L::kFifth) pack_fifth_bits(hbits, out + L::hb(sb, j));
    }
    pack_k4_tail<L>(blk, sb, out);
  }
}

// Q4_K and Q5_K, per output, over super-blocks in order (acc = mins = 0):
//   isum = exact int32 sum_j sc_j * sum_{k in sub-block j} q[k] * a[k]
//   msum = exact int32 sum_j m_j * (a's sum over sub-block j)
//   acc  = fma(d * d_a, float(isum), acc);  mins = fma(dmin * d_a, float(msum), mins)
// and y = acc - mins: quant_avx2's vec_dot_q4_K / vec_dot_q5_K. A Q4_K
// sub-block's 8 maddubs add up in int16 as Q4_1's (<= 30480), then one madd
// applies its scale; Q5_K's (|pair| <= 2 * 31 * 127) in two halves of 4
// (<= 31496), each scaled by its own madd.

// msum of T tokens for one group super-block (mn: the 4 widened min pairs).
template <class L, int T>
inline void k4_msum(const uint8_t* group, int64_t sb, const ActBlockK& a, __m256i ms[T]) {
  __m256i mv[4];
  for (int k = 0; k < 4; ++k) mv[k] = _mm256_cvtepu8_epi16(load128(group + L::mn(sb, k)));
  for (int t = 0; t < T; ++t) {
    __m256i m = _mm256_madd_epi16(mv[0], bcast32(&a.bsum_pairs[t][0]));
    for (int k = 1; k < 4; ++k) {
      m = _mm256_add_epi32(
          m, _mm256_madd_epi16(mv[k], bcast32(&a.bsum_pairs[t][2 * k])));
    }
    ms[t] = m;
  }
}

template <class L, int T>
inline void k4_finish(const uint8_t* group, int64_t sb, const ActBlockK& a, const __m256i isum[T],
                      const __m256i ms[T], __m256 acc[T], __m256 mins[T]) {
  const __m256 d = _mm256_cvtph_ps(load128(group + L::d(sb)));
  const __m256 dm = _mm256_cvtph_ps(load128(group + L::dmin(sb)));
  for (int t = 0; t < T; ++t) {
    const __m256 da = _mm256_broadcast_ss(&a.d[t]);
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(isum[t]), acc[t]);
    mins[t] = _mm256_fmadd_ps(_mm256_mul_ps(dm, da), _mm256_cvtepi32_ps(ms[t]), mins[t]);
  }
}

// isum[t] += sub-block j's int16 sums s16[t] times its scale (isum starts at
// zero: accumulators are zeroed, not set on the first pass, so that no
// compiler sees a maybe-uninitialized read across the non-unrolled loop).
template <class L, int T>
inline void k4_scale(const uint8_t* group, int64_t sb, int j, const __m256i s16[T], __m256i isum[T]) {
  const __m256i scv = load_scales_u8(group + L::sc(sb, j));
  for (int t = 0; t < T; ++t) {
    const __m256i w = sum_scaled(s16[t], scv);
    isum[t] = _mm256_add_epi32(isum[t], w);
  }
}

// One packed Q4_K / Q5_K group x T tokens, quants merged per call (the
// one-tile path).
template <class L, int T>
void kernel_k4(const uint8_t* group, int64_t nsb, const void* act_v, float* y, int64_t y_stride, int n_rows) {
  const auto* act = static_cast<const ActBlockK*>(act_v);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[T], mins[T];
  for (int t = 0; t < T; ++t) acc[t] = mins[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    __m256i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = group + L::qs(sb, j);
      // this sub-block's share of the super-block (tail included)
      prefetch_span<L::kSuper / 8>(group + size_t(sb) * L::kSuper + size_t(j) * (L::kSuper / 8));
      const int8_t* aq[T];
      for (int t = 0; t < T; ++t) aq[t] = a.qs[t] + 32 * j;
      if constexpr (L::kFifth) {
        const __m256i hb = load256(group + L::hb(sb, j));
        auto load = [&](int i, __m256i* lo, __m256i* hi) { load_step_5bit(q, hb, i, lo, hi); };
        __m256i s01[T], s23[T];
        steps_sum<T, 0, 2>(load, aq, s01);
        steps_sum<T, 2, 4>(load, aq, s23);
        k4_scale<L, T>(group, sb, j, s01, isum);
        k4_scale<L, T>(group, sb, j, s23, isum);
      } else {
        __m256i s16[T];
        steps_sum<T, 0, 4>(
            [&](int i, __m256i* lo, __m256i* hi) {
              const __m256i wq = load256(q + 32 * i);
              *lo = _mm256_and_si256(wq, m4);
              *hi = _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4);
            },
            aq, s16);
        k4_scale<L, T>(group, sb, j, s16, isum);
      }
    }
    __m256i ms[T];
    k4_msum<L, T>(group, sb, a, ms);
    k4_finish<L, T>(group, sb, a, isum, ms, acc, mins);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, _mm256_sub_ps(acc[t], mins[t]), n_rows);
}

// A Q4_K / Q5_K group's quants one byte per element (8 unpacked blocks per
// super-block).
template <class L>
void unpack_k4(const uint8_t* group, int64_t nsb, uint8_t* out) {
  for (int64_t sb = 0; sb < nsb; ++sb) {
    for (int j = 0; j < 8; ++j) {
      uint8_t* o = out + (size_t(sb) * 8 + size_t(j)) * kUnpackedBlock;
      if constexpr (L::kFifth) {
        unpack_5bit_block(group + L::qs(sb, j), group + L::hb(sb, j), o);
      } else {
        unpack_nibbles_block(group + L::qs(sb, j), o);
      }
    }
  }
}

// kernel_k4 on two groups split by unpack_k4 (rows 8-15 from u1 / group1,
// n_rows1 valid), T <= kTok: each activation broadcast feeds 16 rows.
// Bitwise equal to kernel_k4.
template <class L, int T>
void kernel_k4_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0, const uint8_t* group1,
                             int64_t nsb, const void* act_v, float* y, int64_t y_stride, int n_rows1) {
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlockK*>(act_v);
  __m256 acc0[T], acc1[T], mins0[T], mins1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = mins0[t] = mins1[t] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    __m256i isum0[T], isum1[T];
    for (int t = 0; t < T; ++t) isum0[t] = isum1[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const size_t off = (size_t(sb) * 8 + size_t(j)) * kUnpackedBlock;
      const int8_t* aq[T];
      for (int t = 0; t < T; ++t) aq[t] = a.qs[t] + 32 * j;
      if constexpr (L::kFifth) {
        __m256i s01_0[T], s01_1[T], s23_0[T], s23_1[T];
        pair_steps_sum<T, 0, 2>(u0 + off, u1 + off, aq, s01_0, s01_1);
        pair_steps_sum<T, 2, 4>(u0 + off, u1 + off, aq, s23_0, s23_1);
        k4_scale<L, T>(group0, sb, j, s01_0, isum0);
        k4_scale<L, T>(group0, sb, j, s23_0, isum0);
        k4_scale<L, T>(group1, sb, j, s01_1, isum1);
        k4_scale<L, T>(group1, sb, j, s23_1, isum1);
      } else {
        __m256i s0[T], s1[T];
        pair_steps_sum<T, 0, 4>(u0 + off, u1 + off, aq, s0, s1);
        k4_scale<L, T>(group0, sb, j, s0, isum0);
        k4_scale<L, T>(group1, sb, j, s1, isum1);
      }
    }
    __m256i ms[T];
    k4_msum<L, T>(group0, sb, a, ms);
    k4_finish<L, T>(group0, sb, a, isum0, ms, acc0, mins0);
    k4_msum<L, T>(group1, sb, a, ms);
    k4_finish<L, T>(group1, sb, a, isum1, ms, acc1, mins1);
  }
  for (int t = 0; t < T; ++t) {
    acc0[t] = _mm256_sub_ps(acc0[t], mins0[t]);
    acc1[t] = _mm256_sub_ps(acc1[t], mins1[t]);
  }
  store_pair_rows<T>(y, y_stride, acc0, acc1, n_rows1);
}

// ------------------------------------------------------------------- Q6_K

constexpr size_t kSuper6 = 1680;
inline size_t ql6(int64_t sb, int w) { return size_t(sb) * kSuper6 + 32 * size_t(w); }
inline size_t qh6(int64_t sb, int s) { return size_t(sb) * kSuper6 + 1024 + 32 * size_t(s); }
inline size_t sc6(int64_t sb, int s) { return size_t(sb) * kSuper6 + 1536 + 8 * size_t(s); }
inline size_t d6(int64_t sb) { return size_t(sb) * kSuper6 + 1664; }
size_t used_bytes_q6_K(int64_t nsb) { return size_t(nsb) * kSuper6; }

void pack_q6_K(const WeightView& w, int64_t g, uint8_t* out) {
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
          out[ql6(sb, wv) + 4 * r + k] = uint8_t((u(8 * wv + k) & 0x0F) | (u(8 * wv + 4 + k) & 0x0F) << 4);
        }
      }
      for (int sub = 0; sub < 16; ++sub) {
        for (int k = 0; k < 4; ++k) {
          uint8_t byte = 0;
          for (int m = 0; m < 4; ++m) byte |= uint8_t((u(16 * sub + 4 * m + k) >> 4) << (2 * m));
          out[qh6(sb, sub) + 4 * r + k] = byte;
        }
        out[sc6(sb, sub) + r] = uint8_t(blk->scales[sub]);
      }
      d[r] = blk->d;
    }
    std::memcpy(out + d6(sb), d, sizeof(d));
  }
}

// Per output, over super-blocks in order (acc = 0):
//   isum = exact int32 sum_s sc_s * (sum_{k in sub-block s} q[k] * a[k] - 32 * bsum_s)
//   acc  = fma(d * d_a, float(isum), acc)
// (quant_avx2's vec_dot_q6_K). Unpacked vector v of a super-block holds
// elements 4v..4v+3 of the 8 rows; sub-block s is vectors 4s..4s+3. vnni
// starts each sub-block's vpdpbusd chain at -32 * bsum_s; avx2 adds two
// vectors' maddubs in int16 (|pair| <= 2 * 63 * 127, two <= 32004) before
// the sub-block's scale is applied by madd, and keeps the -32 terms apart
// (corr) until the super-block's end.

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
  const __m256i wq = load256(group + ql6(sb, 2 * s + M));
  *v0 = _mm256_or_si256(_mm256_and_si256(wq, m4), q6_top_bits<2 * M>(qh));
  *v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(wq, 4), m4), q6_top_bits<2 * M + 1>(qh));
}

// Sub-block s of one token: v[0..3] its unsigned quant vectors, aq the
// token's 16 activations of it, bsum their sum, sc its scales
// (load_scales_i8). isum += sc * (sum v x aq - 32 bsum) (avx2: the -32 term
// goes to corr, see q6_K_finish).
inline void q6_K_sub_block(const __m256i v[4], const int8_t* aq, int16_t bsum, __m256i sc, __m256i& isum,
                           __m256i& corr) {
#if OMNIBUS_PACKED_VNNI
  __m256i p = _mm256_set1_epi32(-32 * int32_t(bsum));
  p = step_add(step_add(p, v[0], bcast32(aq), v[1], bcast32(aq + 4)), v[2], bcast32(aq + 8), v[3], bcast32(aq + 12));
  isum = _mm256_add_epi32(isum, sum_scaled(p, sc));
  (void)corr;
#else
  const __m256i zero = _mm256_setzero_si256();
  const __m256i lo = sum_scaled(step_add(zero, v[0], bcast32(aq), v[1], bcast32(aq + 4)), sc);
  const __m256i hi = sum_scaled(step_add(zero, v[2], bcast32(aq + 8), v[3], bcast32(aq + 12)), sc);
  isum = _mm256_add_epi32(isum, _mm256_add_epi32(lo, hi));
  corr = _mm256_add_epi32(corr, _mm256_madd_epi16(sc, _mm256_set1_epi32(uint16_t(bsum))));  // sc * bsum
#endif
}

// The end of a super-block for T tokens: acc = fma(d * d_a, float(isum - 32 corr), acc).
template <int T>
inline void q6_K_finish(const uint8_t* group, int64_t sb, const ActBlockK& a, const __m256i isum[T],
                        const __m256i corr[T], __m256 acc[T]) {
  const __m256 d = _mm256_cvtph_ps(load128(group + d6(sb)));
  for (int t = 0; t < T; ++t) {
    const __m256i total = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(corr[t], 5));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_broadcast_ss(&a.d[t])), _mm256_cvtepi32_ps(total), acc[t]);
  }
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
    __m256i isum[T], corr[T];
    for (int t = 0; t < T; ++t) isum[t] = corr[t] = _mm256_setzero_si256();
    for (int s = 0; s < 16; ++s) {
      prefetch_span<kSuper6 / 16>(group + size_t(sb) * kSuper6 + size_t(s) * (kSuper6 / 16));
      const __m256i qh = load256(group + qh6(sb, s));
      const __m256i sc = load_scales_i8(group + sc6(sb, s));
      __m256i v[4];
      q6_K_vectors<0>(group, sb, s, qh, &v[0], &v[1]);
      q6_K_vectors<1>(group, sb, s, qh, &v[2], &v[3]);
      for (int t = 0; t < T; ++t) q6_K_sub_block(v, a.qs[t] + 16 * s, a.bsums[t][s], sc, isum[t], corr[t]);
    }
    q6_K_finish<T>(group, sb, a, isum, corr, acc);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// A Q6_K group's quants one byte per element: per super-block the 64
// unpacked vectors in order (2048 bytes).
void unpack_q6_K(const uint8_t* group, int64_t nsb, uint8_t* out) {
  for (int64_t sb = 0; sb < nsb; ++sb) {
    auto* o = reinterpret_cast<__m256i*>(out + size_t(sb) * 2048);
    for (int s = 0; s < 16; ++s) {
      const __m256i qh = load256(group + qh6(sb, s));
      __m256i v[4];
      q6_K_vectors<0>(group, sb, s, qh, &v[0], &v[1]);
      q6_K_vectors<1>(group, sb, s, qh, &v[2], &v[3]);
      for (int m = 0; m < 4; ++m) _mm256_store_si256(o + 4 * s + m, v[m]);
    }
  }
}

// kernel_q6_K on two groups unpacked by unpack_q6_K (rows 8-15 from u1
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
    __m256i isum0[T], isum1[T], corr0[T], corr1[T];
    for (int t = 0; t < T; ++t) isum0[t] = isum1[t] = corr0[t] = corr1[t] = _mm256_setzero_si256();
    for (int s = 0; s < 16; ++s) {
      const __m256i sc0 = load_scales_i8(group0 + sc6(sb, s));
      const __m256i sc1 = load_scales_i8(group1 + sc6(sb, s));
      __m256i v0[4], v1[4];
      for (int m = 0; m < 4; ++m) v0[m] = _mm256_load_si256(x0 + 4 * s + m), v1[m] = _mm256_load_si256(x1 + 4 * s + m);
      for (int t = 0; t < T; ++t) {
        const int8_t* aq = a.qs[t] + 16 * s;
        q6_K_sub_block(v0, aq, a.bsums[t][s], sc0, isum0[t], corr0[t]);
        q6_K_sub_block(v1, aq, a.bsums[t][s], sc1, isum1[t], corr1[t]);
        keep_in_register(isum0[t]);
        keep_in_register(isum1[t]);
      }
    }
    q6_K_finish<T>(group0, sb, a, isum0, corr0, acc0);
    q6_K_finish<T>(group1, sb, a, isum1, corr1, acc1);
  }
  store_pair_rows<T>(y, y_stride, acc0, acc1, n_rows1);
}


#if defined(__AVX512F__)
// kernel_q6_K_unpacked_pair with both groups in 512-bit registers: per
// sub-block one exact int32 sum (its chain started at -32 * bsum_s) times its
// scale, bitwise equal.
template <int T>
void kernel_q6_K_unpacked_pair512(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                                  const uint8_t* group1, int64_t nsb, const void* act_v, float* y,
                                  int64_t y_stride, int n_rows1) {
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlockK*>(act_v);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const ActBlockK& a = act[sb];
    const uint8_t* x0 = u0 + size_t(sb) * 2048;
    const uint8_t* x1 = u1 + size_t(sb) * 2048;
    __m512i isum[T];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int s = 0; s < 16; ++s) {
      const __m512i sc = join_scales8(group0 + sc6(sb, s), group1 + sc6(sb, s));
      __m512i v[4];
      for (int m = 0; m < 4; ++m) v[m] = join256(x0 + 32 * (4 * s + m), x1 + 32 * (4 * s + m));
      for (int t = 0; t < T; ++t) {
        const int8_t* aq = a.qs[t] + 16 * s;
        __m512i p = step_add512(_mm512_set1_epi32(-32 * int32_t(a.bsums[t][s])), v[0], bcast32_512(aq), v[1],
                                bcast32_512(aq + 4));
        p = step_add512(p, v[2], bcast32_512(aq + 8), v[3], bcast32_512(aq + 12));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(p, sc));
        keep_in_register(isum[t]);
      }
    }
    const __m512 d = join_halfs(group0 + d6(sb), group1 + d6(sb));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(a.d[t])), _mm512_cvtepi32_ps(isum[t]), acc[t]);
    }
  }
  store_pair_rows512<T>(y, y_stride, acc, n_rows1);
}
#define OMNIBUS_Q6_K_UPAIR kernel_q6_K_unpacked_pair512
#else
#define OMNIBUS_Q6_K_UPAIR kernel_q6_K_unpacked_pair
#endif

template <class L>
Ops make_ops_k4(PackFn pack, size_t (*used_bytes)(int64_t)) {
  return Ops{
      .kernel = {nullptr, kernel_k4<L, 1>, kernel_k4<L, 2>, kernel_k4<L, 3>, kernel_k4<L, 4>},
      .pack = pack,
      .used_bytes = used_bytes,
      .block_elems = kQKK,
      .k_act = true,
      .unpack = unpack_k4<L>,
      .upair = {nullptr, kernel_k4_unpacked_pair<L, 1>, kernel_k4_unpacked_pair<L, 2>,
                kernel_k4_unpacked_pair<L, 3>, kernel_k4_unpacked_pair<L, 4>},
  };
}

}  // namespace

const Ops& ops_q4_K() {
  static const Ops ops = make_ops_k4<LayoutQ4_K>(pack_k4<LayoutQ4_K, BlockQ4_K>, used_bytes_q4_K);
  return ops;
}

const Ops& ops_q5_K() {
  static const Ops ops = make_ops_k4<LayoutQ5_K>(pack_k4<LayoutQ5_K, BlockQ5_K>, used_bytes_q5_K);
  return ops;
}

const Ops& ops_q6_K() {
  static const Ops ops{
      .kernel = {nullptr, kernel_q6_K<1>, kernel_q6_K<2>, kernel_q6_K<3>, kernel_q6_K<4>},
      .pack = pack_q6_K,
      .used_bytes = used_bytes_q6_K,
      .block_elems = kQKK,
      .k_act = true,
      .unpack = unpack_q6_K,
      .upair = {nullptr, OMNIBUS_Q6_K_UPAIR<1>, OMNIBUS_Q6_K_UPAIR<2>, OMNIBUS_Q6_K_UPAIR<3>,
                OMNIBUS_Q6_K_UPAIR<4>},
  };
  return ops;
}

}  // namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER
#undef OMNIBUS_Q6_K_UPAIR
