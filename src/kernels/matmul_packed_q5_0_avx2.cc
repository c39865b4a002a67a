// Packed Q5_0 (matmul_packed_internal.h): per block b, 176 bytes: qs[4][8
// rows][4 bytes] as Q4_1, then the fifth bits hb[8 rows][4 bytes], then
// half d[8].
//
// Quants are used unsigned (u = q + 16 in [0, 31]: nibble | fifth bit << 4),
// so maddubs needs no sign trick, and the exact block sum is
//   sum (u - 16) * a = sum u * a - 16 * sum a      (sum a: the tile's qsum)
// Per output: acc = fma(d_w * d_a, float(isum), acc) (quant_avx2's
// vec_dot_q5_0). Two steps of maddubs pairs add up in int16 (|pair| <= 2 * 31
// * 127, four <= 31496: exact) before widening.
#include "kernels/matmul_packed_internal.h"
#include "kernels/quant_blocks.h"

namespace omnibus::matmul_packed::internal {
namespace {

constexpr size_t kBlock = 176;
inline size_t qs_at(int64_t b) { return size_t(b) * kBlock; }
inline size_t hb_at(int64_t b) { return size_t(b) * kBlock + 128; }
inline size_t sc_at(int64_t b) { return size_t(b) * kBlock + 160; }

void pack_group(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ5_0 zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ5_0), reinterpret_cast<const uint8_t*>(&zero));
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ5_0* blk[kGroupRows];
    const uint8_t* qs[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const BlockQ5_0*>(rows.row[r] + size_t(b) * rows.step[r]);
      qs[r] = blk[r]->qs;
    }
    store_transposed_16(qs, out + qs_at(b));
    const uint8_t* qh[kGroupRows];
    uint16_t d[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) qh[r] = blk[r]->qh, d[r] = blk[r]->d;
    pack_fifth_bits(qh, out + hb_at(b));
    std::memcpy(out + sc_at(b), d, sizeof(d));
  }
}

size_t used_bytes(int64_t nb) { return size_t(nb) * kBlock; }

// acc[t] += block b's contribution, from the int16 sums of steps 0-1 and 2-3
// (qsum: block b's kTok activation sums).
template <int T>
inline void finish_block(const uint8_t* group, int64_t b, const ActBlock32& a, const int32_t* qsum,
                         const __m256i s01[T], const __m256i s23[T], __m256 acc[T]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 dw = _mm256_cvtph_ps(load128(group + sc_at(b)));
  for (int t = 0; t < T; ++t) {
    const __m256i s32 = _mm256_add_epi32(_mm256_madd_epi16(s01[t], ones), _mm256_madd_epi16(s23[t], ones));
    const __m256i isum = _mm256_sub_epi32(s32, _mm256_set1_epi32(16 * qsum[t]));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d[t])), _mm256_cvtepi32_ps(isum), acc[t]);
  }
}

// One packed group x T tokens, quants merged per call (the one-tile path).
template <int T>
void kernel(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride, int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs_at(b);
    for (int l = 0; l < 3; ++l) prefetch(q + 64 * l);
    const __m256i hb = load256(group + hb_at(b));
    auto load = [&](int i, __m256i* lo, __m256i* hi) { load_step_5bit(q, hb, i, lo, hi); };
    const int8_t* aq[T];
    for (int t = 0; t < T; ++t) aq[t] = a.qs[t];
    __m256i s01[T], s23[T];
    steps_i16<T, 0, 2>(load, aq, s01);
    steps_i16<T, 2, 4>(load, aq, s23);
    finish_block<T>(group, b, a, tile_qsum(act, nb) + b * kTok, s01, s23, acc);
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

void unpack_group(const uint8_t* group, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    unpack_5bit_block(group + qs_at(b), group + hb_at(b), out + size_t(b) * kUnpackedBlock);
  }
}

// kernel on two groups split by unpack_group (rows 8-15 from u1 / group1,
// n_rows1 valid), T <= kTok: each activation broadcast feeds 16 rows.
// Bitwise equal to kernel.
template <int T>
void kernel_unpacked_pair(const uint8_t* u0, const uint8_t* u1, const uint8_t* group0, const uint8_t* group1,
                          int64_t nb, const void* act_v, float* y, int64_t y_stride, int n_rows1) {
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
    __m256i s01_0[T], s01_1[T], s23_0[T], s23_1[T];
    pair_steps_i16<T, 0, 2>(v0, v1, aq, s01_0, s01_1);
    pair_steps_i16<T, 2, 4>(v0, v1, aq, s23_0, s23_1);
    const int32_t* qsum = tile_qsum(act, nb) + b * kTok;
    finish_block<T>(group0, b, a, qsum, s01_0, s23_0, acc0);
    finish_block<T>(group1, b, a, qsum, s01_1, s23_1, acc1);
  }
  store_pair_rows<T>(y, y_stride, acc0, acc1, n_rows1);
}

}  // namespace

const Ops& ops_q5_0() {
  static const Ops ops{
      .kernel = {nullptr, kernel<1>, kernel<2>, kernel<3>, kernel<4>},
      .pack = pack_group,
      .used_bytes = used_bytes,
      .with_qsum = true,
      .unpack = unpack_group,
      .upair = {nullptr, kernel_unpacked_pair<1>, kernel_unpacked_pair<2>, kernel_unpacked_pair<3>,
                kernel_unpacked_pair<4>},
  };
  return ops;
}

}  // namespace omnibus::matmul_packed::internal
