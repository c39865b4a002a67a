// Packed Q4_0, Q5_0 and Q5_1 (matmul_packed_internal.h): one template over
// the format's three traits: fifth bits or not, an offset or not, a min or not.
// Per block b:
//   Q4_0, 144 bytes: qs[4][8 rows][4 bytes] as Q4_1, half d[8]
//   Q5_0, 176 bytes: qs, the fifth bits hb[8 rows][4 bytes], half d[8]
//   Q5_1, 192 bytes: qs, hb, half d[8], half m[8]
//
// Quants are used unsigned: u = nibble (Q4_0: q + 8) or nibble | fifth bit
// << 4 (Q5_0: q + 16; Q5_1: q), so maddubs needs no sign trick, and the exact
// block sum of an offset format is
//   sum (u - off) * a = sum u * a - off * sum a      (sum a: the tile's qsum)
// Per output: acc = fma(d_w * d_a, float(isum), acc), then for Q5_1
// acc = fma(m_w, s_a, acc) (quant_avx2's vec_dots). A token's maddubs pairs
// add up in int16 before widening: all 8 of a 4-bit block (|pair| <= 2 * 15 *
// 127, eight <= 30480), or 4 at a time for 5 bits (2 * 31 * 127, four <=
// 31496): exact.
#include "kernels/matmul_packed_internal.h"
#include "kernels/quant_blocks.h"

namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER {
namespace {

struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kFifth = false, kMin = false;
  static constexpr int32_t kOffset = 8;
};
struct Q5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kFifth = true, kMin = false;
  static constexpr int32_t kOffset = 16;
};
struct Q5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kFifth = true, kMin = true;
  static constexpr int32_t kOffset = 0;
};

// Offsets in a packed group, and the int16 sums per token per block.
template <class F>
struct Layout {
  static constexpr size_t kHb = 128, kScales = F::kFifth ? 160 : 128;
  static constexpr size_t kBlock = kScales + (F::kMin ? 32 : 16);
  static constexpr int kHalves = F::kFifth ? 2 : 1;  // int16 sums of steps [0, 4 / kHalves), ...
  static size_t qs(int64_t b) { return size_t(b) * kBlock; }
  static size_t hb(int64_t b) { return size_t(b) * kBlock + kHb; }
  static size_t d(int64_t b) { return size_t(b) * kBlock + kScales; }
  static size_t m(int64_t b) { return size_t(b) * kBlock + kScales + 16; }
};

template <class F>
void pack_group(const WeightView& w, int64_t g, uint8_t* out) {
  using L = Layout<F>;
  using Block = typename F::Block;
  static const Block zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(Block), reinterpret_cast<const uint8_t*>(&zero));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t *qs[kGroupRows], *qh[kGroupRows];
    uint16_t d[kGroupRows], m[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      const auto* blk = reinterpret_cast<const Block*>(rows.row[r] + size_t(b) * rows.step[r]);
      qs[r] = blk->qs;
      d[r] = blk->d;
      if constexpr (F::kFifth) qh[r] = blk->qh;
      if constexpr (F::kMin) m[r] = blk->m;
    }
    store_transposed_16(qs, out + L::qs(b));
    if constexpr (F::kFifth) pack_fifth_bits(qh, out + L::hb(b));
    std::memcpy(out + L::d(b), d, sizeof(d));
    if constexpr (F::kMin) std::memcpy(out + L::m(b), m, sizeof(m));
  }
}

template <class F>
size_t used_bytes(int64_t nb) {
  return size_t(nb) * Layout<F>::kBlock;
}

// acc[t] += block b's contribution, from the int16 sums s[h][t] (qsum: block
// b's kTok activation sums, for the offset formats).
template <class F, int T>
inline void finish_block(const uint8_t* group, int64_t b, const ActBlock32& a, const int32_t* qsum,
                         const __m256i s[Layout<F>::kHalves][T], __m256 acc[T]) {
  using L = Layout<F>;
  const __m256 dw = _mm256_cvtph_ps(load128(group + L::d(b)));
  for (int t = 0; t < T; ++t) {
    __m256i isum = sum_i32(s[0][t]);
    if constexpr (L::kHalves == 2) isum = _mm256_add_epi32(isum, sum_i32(s[1][t]));
    if constexpr (F::kOffset != 0)
      isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(F::kOffset * qsum[t]));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d[t])),
                             _mm256_cvtepi32_ps(isum), acc[t]);
  }
  if constexpr (F::kMin) {
    const __m256 mw = _mm256_cvtph_ps(load128(group + L::m(b)));
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(&a.s[t]), acc[t]);
  }
}

// The qsum pointer of block b (null for formats without an offset).
template <class F>
inline const int32_t* block_qsum(const ActBlock32* act, int64_t nb, int64_t b) {
  if constexpr (F::kOffset != 0) return tile_qsum(act, nb) + b * kTok;
  return nullptr;
}

// One packed group x T tokens, quants merged per call (the one-tile path).
template <class F, int T>
void kernel(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride,
            int n_rows) {
  using L = Layout<F>;
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + L::qs(b);
    for (int l = 0; l < 3; ++l) prefetch(q + 64 * l);
    const int8_t* aq[T];
    for (int t = 0; t < T; ++t) aq[t] = a.qs[t];
    __m256i s[L::kHalves][T];
    if constexpr (F::kFifth) {
      const __m256i hb = load256(group + L::hb(b));
      auto load = [&](int i, __m256i* lo, __m256i* hi) { load_step_5bit(q, hb, i, lo, hi); };
      steps_sum<T, 0, 2>(load, aq, s[0]);
      steps_sum<T, 2, 4>(load, aq, s[L::kHalves - 1]);
    } else {
      steps_sum<T, 0, 4>(
          [&](int i, __m256i* lo, __m256i* hi) {
            const __m256i wq = load256(q + 32 * i);
            *lo = _mm256_and_si256(wq, m4);
            *hi = _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4);
          },
          aq, s[0]);
    }
    finish_block<F, T>(group, b, a, block_qsum<F>(act, nb, b), s, acc);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

template <class F>
void unpack_group(const uint8_t* group, int64_t nb, uint8_t* out) {
  using L = Layout<F>;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = out + size_t(b) * kUnpackedBlock;
    if constexpr (F::kFifth) {
      unpack_5bit_block(group + L::qs(b), group + L::hb(b), o);
    } else {
      unpack_nibbles_block(group + L::qs(b), o);
    }
  }
}

// kernel on two groups split by unpack_group (rows 8-15 from u1 / group1,
// n_rows1 valid), T <= kTok: each activation broadcast feeds 16 rows.
// Bitwise equal to kernel.
template <class F, int T>
void kernel_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                          const uint8_t* group1, int64_t nb, const void* act_v, float* y,
                          int64_t y_stride, int n_rows1) {
  using L = Layout<F>;
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlock32*>(act_v);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* v0 = u0 + size_t(b) * kUnpackedBlock;
    const uint8_t* v1 = u1 + size_t(b) * kUnpackedBlock;
    const int8_t* aq[T];
    for (int t = 0; t < T; ++t) aq[t] = a.qs[t];
    __m256i s0[L::kHalves][T], s1[L::kHalves][T];
    if constexpr (F::kFifth) {
      pair_steps_sum<T, 0, 2>(v0, v1, aq, s0[0], s1[0]);
      pair_steps_sum<T, 2, 4>(v0, v1, aq, s0[L::kHalves - 1], s1[L::kHalves - 1]);
    } else {
      pair_steps_sum<T, 0, 4>(v0, v1, aq, s0[0], s1[0]);
    }
    const int32_t* qsum = block_qsum<F>(act, nb, b);
    finish_block<F, T>(group0, b, a, qsum, s0, acc0);
    finish_block<F, T>(group1, b, a, qsum, s1, acc1);
  }
  store_pair_rows<T>(y, y_stride, acc0, acc1, n_rows1);
}

#if defined(__AVX512F__)
// kernel_unpacked_pair with both groups in 512-bit registers
// (matmul_packed_internal.h, "512-bit group pairs"): one exact int32 sum per
// block (the avx2 kernels' two int16 halves add up to it), bitwise equal.
template <class F, int T>
void kernel_unpacked_pair512(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0,
                             const uint8_t* group1, int64_t nb, const void* act_v, float* y,
                             int64_t y_stride, int n_rows1) {
  using L = Layout<F>;
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlock32*>(act_v);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const int8_t* aq[T];
    for (int t = 0; t < T; ++t) aq[t] = a.qs[t];
    __m512i s[T];
    pair_steps_sum512<T>(u0 + size_t(b) * kUnpackedBlock, u1 + size_t(b) * kUnpackedBlock, aq, s);
    const int32_t* qsum = block_qsum<F>(act, nb, b);
    const __m512 dw = join_halfs(group0 + L::d(b), group1 + L::d(b));
    for (int t = 0; t < T; ++t) {
      __m512i isum = s[t];
      if constexpr (F::kOffset != 0) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(F::kOffset * qsum[t]));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d[t])), _mm512_cvtepi32_ps(isum), acc[t]);
    }
    if constexpr (F::kMin) {
      const __m512 mw = join_halfs(group0 + L::m(b), group1 + L::m(b));
      for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[t]), acc[t]);
    }
  }
  store_pair_rows512<T>(y, y_stride, acc, n_rows1);
}
#define OMNIBUS_Q4_0_Q5_UPAIR kernel_unpacked_pair512
#else
#define OMNIBUS_Q4_0_Q5_UPAIR kernel_unpacked_pair
#endif

template <class F>
Ops make_ops() {
  return Ops{
      .kernel = {nullptr, kernel<F, 1>, kernel<F, 2>, kernel<F, 3>, kernel<F, 4>},
      .pack = pack_group<F>,
      .used_bytes = used_bytes<F>,
      .with_sum = F::kMin,
      .with_qsum = F::kOffset != 0,
      .unpack = unpack_group<F>,
      .upair = {nullptr, OMNIBUS_Q4_0_Q5_UPAIR<F, 1>, OMNIBUS_Q4_0_Q5_UPAIR<F, 2>,
                OMNIBUS_Q4_0_Q5_UPAIR<F, 3>, OMNIBUS_Q4_0_Q5_UPAIR<F, 4>},
  };
}

}  // namespace

const Ops& ops_q4_0() {
  static const Ops ops = make_ops<Q4_0>();
  return ops;
}

const Ops& ops_q5_0() {
  static const Ops ops = make_ops<Q5_0>();
  return ops;
}

const Ops& ops_q5_1() {
  static const Ops ops = make_ops<Q5_1>();
  return ops;
}

}  // namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER
#undef OMNIBUS_Q4_0_Q5_UPAIR
