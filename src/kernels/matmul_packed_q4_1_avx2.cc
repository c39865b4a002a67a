// Packed Q4_1 (matmul_packed_internal.h): per block b, 160 bytes:
// qs[4][8 rows][4 bytes] (the row's qs[4i..4i+3]: low nibbles elements
// 4i..4i+3, high nibbles 16+4i..16+4i+3), half d[8], half m[8].
// Per output: acc = fma(d_w * d_a, float(isum), acc); acc = fma(m_w, s_a, acc).
// A token's 8 maddubs per block add up in int16 (|pair| <= 2 * 15 * 127,
// eight <= 30480: exact) and widen once.
#include "kernels/matmul_packed_internal.h"
#include "kernels/quant_blocks.h"

namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER {
namespace {

constexpr size_t kBlock = 160;
inline size_t qs_at(int64_t b) { return size_t(b) * kBlock; }
inline size_t sc_at(int64_t b) { return size_t(b) * kBlock + 128; }

void pack_group(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ4_1 zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ4_1), reinterpret_cast<const uint8_t*>(&zero));
  // [d0 m0 d1 m1 d2 m2 d3 m3] per 128-bit half -> [d0..d3 m0..m3]
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_1* blk[kGroupRows];
    const uint8_t* qs[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const BlockQ4_1*>(rows.row[r] + size_t(b) * rows.step[r]);
      qs[r] = blk[r]->qs;
    }
    store_transposed_16(qs, out + qs_at(b));
    const __m256i dm = _mm256_setr_epi32(load_i32(blk[0]), load_i32(blk[1]), load_i32(blk[2]),
                                         load_i32(blk[3]), load_i32(blk[4]), load_i32(blk[5]),
                                         load_i32(blk[6]), load_i32(blk[7]));
    const __m256i s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(dm, split), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + sc_at(b)), s);
  }
}

size_t used_bytes(int64_t nb) { return size_t(nb) * kBlock; }

// acc[t] += block b's contribution, from the int16 sums s16[t].
template <int T>
inline void finish_block(const uint8_t* group, int64_t b, const float* const da[T], const float* const sa[T],
                         const __m256i s16[T], __m256 acc[T]) {
  const __m256 dw = _mm256_cvtph_ps(load128(group + sc_at(b)));
  const __m256 mw = _mm256_cvtph_ps(load128(group + sc_at(b) + 16));
  for (int t = 0; t < T; ++t) {
    const __m256 isum = _mm256_cvtepi32_ps(sum_i32(s16[t]));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(da[t])), isum, acc[t]);
    acc[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(sa[t]), acc[t]);
  }
}

// finish_block for a pair of groups, each token's scale and sum broadcast once.
template <int T>
inline void finish_block_pair(const uint8_t* group0, const uint8_t* group1, int64_t b, const ActBlock32& a,
                              const __m256i s0[T], const __m256i s1[T], __m256 acc0[T], __m256 acc1[T]) {
  const __m256 dw0 = _mm256_cvtph_ps(load128(group0 + sc_at(b)));
  const __m256 mw0 = _mm256_cvtph_ps(load128(group0 + sc_at(b) + 16));
  const __m256 dw1 = _mm256_cvtph_ps(load128(group1 + sc_at(b)));
  const __m256 mw1 = _mm256_cvtph_ps(load128(group1 + sc_at(b) + 16));
  for (int t = 0; t < T; ++t) {
    const __m256 da = _mm256_broadcast_ss(&a.d[t]), sa = _mm256_broadcast_ss(&a.s[t]);
    const __m256 isum0 = _mm256_cvtepi32_ps(sum_i32(s0[t]));
    const __m256 isum1 = _mm256_cvtepi32_ps(sum_i32(s1[t]));
    acc0[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw0, da), isum0, acc0[t]);
    acc0[t] = _mm256_fmadd_ps(mw0, sa, acc0[t]);
    acc1[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw1, da), isum1, acc1[t]);
    acc1[t] = _mm256_fmadd_ps(mw1, sa, acc1[t]);
  }
}

// One packed group x T tokens, nibbles split per call (the one-tile path).
template <int T>
void kernel(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride, int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs_at(b);
    for (int l = 0; l < 3; ++l) prefetch(q + 64 * l);
    const int8_t* aq[T];
    const float *da[T], *sa[T];
    for (int t = 0; t < T; ++t) aq[t] = a.qs[t], da[t] = &a.d[t], sa[t] = &a.s[t];
    __m256i s16[T];
    steps_sum<T, 0, 4>(
        [&](int i, __m256i* lo, __m256i* hi) {
          const __m256i wq = load256(q + 32 * i);
          *lo = _mm256_and_si256(wq, m4);
          *hi = _mm256_and_si256(_mm256_srli_epi16(wq, 4), m4);
        },
        aq, s16);
    finish_block<T>(group, b, da, sa, s16, acc);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

void unpack_group(const uint8_t* group, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) unpack_nibbles_block(group + qs_at(b), out + size_t(b) * kUnpackedBlock);
}

// kernel on a group split by unpack_group (scales still read from the packed
// group), T <= 2 * kTok tokens (t >= kTok from act1): bitwise equal to kernel.
template <int T>
void kernel_unpacked(const uint8_t* unpacked, const uint8_t* group, int64_t nb, const void* act0_v,
                     const void* act1_v, float* y, int64_t y_stride, int n_rows) {
  static_assert(T >= 1 && T <= 2 * kTok);
  const auto* act0 = static_cast<const ActBlock32*>(act0_v);
  const auto* act1 = static_cast<const ActBlock32*>(act1_v);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a0 = act0[b];
    const ActBlock32& a1 = act1[T > kTok ? b : 0];
    const uint8_t* u = unpacked + size_t(b) * kUnpackedBlock;
    const int8_t* aq[T];
    const float *da[T], *sa[T];
    for (int t = 0; t < T; ++t) {
      const ActBlock32& a = t < kTok ? a0 : a1;
      const int k = t < kTok ? t : t - kTok;
      aq[t] = a.qs[k], da[t] = &a.d[k], sa[t] = &a.s[k];
    }
    __m256i s16[T];
    steps_sum<T, 0, 4>(
        [&](int i, __m256i* lo, __m256i* hi) {
          *lo = load256a(u + 64 * i);
          *hi = load256a(u + 64 * i + 32);
        },
        aq, s16);
    finish_block<T>(group, b, da, sa, s16, acc);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// kernel_unpacked on two groups (rows 8-15 from u1 / group1, n_rows1 valid),
// T <= kTok: each activation broadcast feeds 16 rows. Bitwise equal to kernel.
template <int T>
void kernel_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0, const uint8_t* group1,
                          int64_t nb, const void* act_v, float* y, int64_t y_stride, int n_rows1) {
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlock32*>(act_v);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const int8_t* aq[T];
    for (int t = 0; t < T; ++t) aq[t] = a.qs[t];
    __m256i s0[T], s1[T];
    pair_steps_sum<T, 0, 4>(u0 + size_t(b) * kUnpackedBlock, u1 + size_t(b) * kUnpackedBlock, aq, s0, s1);
    finish_block_pair<T>(group0, group1, b, a, s0, s1, acc0, acc1);
  }
  store_pair_rows<T>(y, y_stride, acc0, acc1, n_rows1);
}

#if defined(__AVX512F__)
// kernel_unpacked_pair with both groups in 512-bit registers
// (matmul_packed_internal.h, "512-bit group pairs"): bitwise equal.
template <int T>
void kernel_unpacked_pair512(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0, const uint8_t* group1,
                             int64_t nb, const void* act_v, float* y, int64_t y_stride, int n_rows1) {
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
    const __m512 dw = join_halfs(group0 + sc_at(b), group1 + sc_at(b));
    const __m512 mw = join_halfs(group0 + sc_at(b) + 16, group1 + sc_at(b) + 16);
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d[t])), _mm512_cvtepi32_ps(s[t]), acc[t]);
      acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[t]), acc[t]);
    }
  }
  store_pair_rows512<T>(y, y_stride, acc, n_rows1);
}
#define OMNIBUS_Q4_1_UPAIR kernel_unpacked_pair512
#else
#define OMNIBUS_Q4_1_UPAIR kernel_unpacked_pair
#endif

}  // namespace

const Ops& ops_q4_1() {
  static const Ops ops{
      .kernel = {nullptr, kernel<1>, kernel<2>, kernel<3>, kernel<4>},
      .pack = pack_group,
      .used_bytes = used_bytes,
      .with_sum = true,
      .unpack = unpack_group,
      .upair = {nullptr, OMNIBUS_Q4_1_UPAIR<1>, OMNIBUS_Q4_1_UPAIR<2>, OMNIBUS_Q4_1_UPAIR<3>,
                OMNIBUS_Q4_1_UPAIR<4>},
      .unpacked_single = {nullptr, kernel_unpacked<1>, kernel_unpacked<2>, kernel_unpacked<3>, kernel_unpacked<4>,
                          kernel_unpacked<5>, kernel_unpacked<6>, kernel_unpacked<7>, kernel_unpacked<8>},
  };
  return ops;
}

}  // namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER
#undef OMNIBUS_Q4_1_UPAIR
