// Packed Q8_0 (matmul_packed_internal.h): per pair of blocks (2p, 2p+1), 544
// bytes: qs of 2p, qs of 2p+1 (each [8][8 rows][4 bytes]: bytes 4i..4i+3 of
// the row, elements 4i..4i+3), half d[8] of 2p, half d[8] of 2p+1.
// Per output: isum exact int32, acc = fma(d_w * d_a, float(isum), acc)
// (quant_avx2's vec_dot_q8_0). Signed weights go through the sign trick.
#include "kernels/matmul_packed_internal.h"
#include "kernels/quant_blocks.h"

namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER {
namespace {

constexpr size_t kPair = 544;
inline size_t qs_at(int64_t b) { return size_t(b / 2) * kPair + size_t(b % 2) * 256; }
inline size_t sc_at(int64_t b) { return size_t(b / 2) * kPair + 512 + size_t(b % 2) * 16; }

void pack_group(const WeightView& w, int64_t g, uint8_t* out) {
  static const BlockQ8_0 zero{};
  const int64_t nb = w.n_in / kQK;
  const GroupRows rows = group_rows(w, g, sizeof(BlockQ8_0), reinterpret_cast<const uint8_t*>(&zero));
  if (nb % 2 != 0) std::memset(out + qs_at(nb), 0, kPair / 2);  // the unused half pair
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0* blk[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) {
      blk[r] = reinterpret_cast<const BlockQ8_0*>(rows.row[r] + size_t(b) * rows.step[r]);
    }
    // dwords 0-3 and 4-7 of the 8 rows, as two 4x8 transposes
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qs[kGroupRows];
      for (int r = 0; r < kGroupRows; ++r) qs[r] = reinterpret_cast<const uint8_t*>(blk[r]->qs) + 16 * half;
      store_transposed_16(qs, out + qs_at(b) + 128 * half);
    }
    uint16_t d[kGroupRows];
    for (int r = 0; r < kGroupRows; ++r) d[r] = blk[r]->d;
    std::memcpy(out + sc_at(b), d, sizeof(d));
  }
}

size_t used_bytes(int64_t nb) { return size_t((nb + 1) / 2) * kPair; }

// Signed weights: |w| x (a with w's sign) per 4-byte lane (|pair| <= 2 * 128 * 127).
template <int T>
void kernel(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride,
                 int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs_at(b);
    for (int l = 0; l < 5; ++l) prefetch(group + size_t(b) * (kPair / 2) + 64 * l);
    __m256i s32[T];
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i wq = load256(q + 32 * j);
      const __m256i uw = _mm256_sign_epi8(wq, wq);
      for (int t = 0; t < T; ++t) {
        if (j == 0) s32[t] = _mm256_setzero_si256();
        s32[t] = dot4_add(s32[t], uw, _mm256_sign_epi8(bcast32(a.qs[t] + 4 * j), wq));
        keep_in_register(s32[t]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(group + sc_at(b)));
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d[t])),
                               _mm256_cvtepi32_ps(s32[t]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}

// kernel on two groups at once (rows 8-15 from group1, n_rows1 valid),
// for many-token calls: each activation broadcast feeds both groups. Per
// output the same operations in the same order: bitwise equal to kernel.
template <int T>
void kernel_pair(const uint8_t* group0, const uint8_t* group1, int64_t nb, const void* act_v,
                      float* y, int64_t y_stride, int n_rows1) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  static_assert(T >= 1 && T <= kTok);
  __m256 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q0 = group0 + qs_at(b);
    const uint8_t* q1 = group1 + qs_at(b);
    __m256i s0[T], s1[T];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i wq0 = load256(q0 + 32 * j), wq1 = load256(q1 + 32 * j);
      const __m256i uw0 = _mm256_sign_epi8(wq0, wq0), uw1 = _mm256_sign_epi8(wq1, wq1);
      for (int t = 0; t < T; ++t) {
        const __m256i av = bcast32(a.qs[t] + 4 * j);
        if (j == 0) s0[t] = s1[t] = _mm256_setzero_si256();
        s0[t] = dot4_add(s0[t], uw0, _mm256_sign_epi8(av, wq0));
        s1[t] = dot4_add(s1[t], uw1, _mm256_sign_epi8(av, wq1));
        keep_in_register(s0[t]);
        keep_in_register(s1[t]);
      }
    }
    const __m256 dw0 = _mm256_cvtph_ps(load128(group0 + sc_at(b)));
    const __m256 dw1 = _mm256_cvtph_ps(load128(group1 + sc_at(b)));
    for (int t = 0; t < T; ++t) {
      const __m256 da = _mm256_broadcast_ss(&a.d[t]);
      acc0[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw0, da), _mm256_cvtepi32_ps(s0[t]), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw1, da), _mm256_cvtepi32_ps(s1[t]), acc1[t]);
    }
  }
  store_pair_rows<T>(y, y_stride, acc0, acc1, n_rows1);
}

#if OMNIBUS_PACKED_VNNI
// The VNNI tiers skip the sign trick: vpdpbusd multiplies the weights offset
// to unsigned (w ^ 0x80 = w + 128) by the signed activations without int16
// limits, and the block's exact activation sum (Ops::with_qsum) takes the
// offset back out: isum = sum (w + 128) a - 128 sum a, the same exact int32
// as the avx2 kernels', so bitwise the same y.
inline __m256i offset_quants(const uint8_t* q) { return _mm256_xor_si256(load256(q), _mm256_set1_epi8(-128)); }

template <int T>
void kernel_vnni(const uint8_t* group, int64_t nb, const void* act_v, float* y, int64_t y_stride, int n_rows) {
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const int32_t* qsum = tile_qsum(act, nb);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q = group + qs_at(b);
    for (int l = 0; l < 5; ++l) prefetch(group + size_t(b) * (kPair / 2) + 64 * l);
    __m256i s32[T];
    for (int t = 0; t < T; ++t) s32[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i u = offset_quants(q + 32 * j);
      for (int t = 0; t < T; ++t) {
        s32[t] = dpbusd(s32[t], u, bcast32(a.qs[t] + 4 * j));
        keep_in_register(s32[t]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(load128(group + sc_at(b)));
    for (int t = 0; t < T; ++t) {
      const __m256i isum = _mm256_sub_epi32(s32[t], _mm256_set1_epi32(128 * qsum[b * kTok + t]));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(&a.d[t])), _mm256_cvtepi32_ps(isum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) store_rows(y + t * y_stride, acc[t], n_rows);
}
#endif

#if defined(__AVX512F__)
// kernel_vnni on two groups in 512-bit registers (matmul_packed_internal.h,
// "512-bit group pairs"): bitwise equal to kernel.
template <int T>
void kernel_pair512(const uint8_t* group0, const uint8_t* group1, int64_t nb, const void* act_v, float* y,
                    int64_t y_stride, int n_rows1) {
  static_assert(T >= 1 && T <= kTok);
  const auto* act = static_cast<const ActBlock32*>(act_v);
  const int32_t* qsum = tile_qsum(act, nb);
  const __m512i bias = _mm512_set1_epi8(-128);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& a = act[b];
    const uint8_t* q0 = group0 + qs_at(b);
    const uint8_t* q1 = group1 + qs_at(b);
    __m512i s[T];
    for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i u = _mm512_xor_si512(join256(q0 + 32 * j, q1 + 32 * j), bias);
      for (int t = 0; t < T; ++t) {
        s[t] = _mm512_dpbusd_epi32(s[t], u, bcast32_512(a.qs[t] + 4 * j));
        keep_in_register(s[t]);
      }
    }
    const __m512 dw = join_halfs(group0 + sc_at(b), group1 + sc_at(b));
    for (int t = 0; t < T; ++t) {
      const __m512i isum = _mm512_sub_epi32(s[t], _mm512_set1_epi32(128 * qsum[b * kTok + t]));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d[t])), _mm512_cvtepi32_ps(isum), acc[t]);
    }
  }
  store_pair_rows512<T>(y, y_stride, acc, n_rows1);
}
#endif

}  // namespace

const Ops& ops_q8_0() {
#if defined(__AVX512F__)
  static const Ops ops{
      .kernel = {nullptr, kernel_vnni<1>, kernel_vnni<2>, kernel_vnni<3>, kernel_vnni<4>},
      .pack = pack_group,
      .used_bytes = used_bytes,
      .with_qsum = true,
      .pair = {nullptr, kernel_pair512<1>, kernel_pair512<2>, kernel_pair512<3>, kernel_pair512<4>},
  };
#elif OMNIBUS_PACKED_VNNI
  static const Ops ops{
      .kernel = {nullptr, kernel_vnni<1>, kernel_vnni<2>, kernel_vnni<3>, kernel_vnni<4>},
      .pack = pack_group,
      .used_bytes = used_bytes,
      .with_qsum = true,
      .pair = {nullptr, kernel_pair<1>, kernel_pair<2>, kernel_pair<3>, kernel_pair<4>},
  };
#else
  static const Ops ops{
      .kernel = {nullptr, kernel<1>, kernel<2>, kernel<3>, kernel<4>},
      .pack = pack_group,
      .used_bytes = used_bytes,
      .pair = {nullptr, kernel_pair<1>, kernel_pair<2>, kernel_pair<3>, kernel_pair<4>},
  };
#endif
  return ops;
}

}  // namespace omnibus::matmul_packed::internal::OMNIBUS_PACKED_TIER
