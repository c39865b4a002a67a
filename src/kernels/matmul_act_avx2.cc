// Activation tiles of the packed matmul (matmul_act_avx2.h).
#include "kernels/matmul_act_avx2.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu_features.h"
#include "kernels/matmul_act_avx512.h"
#include "kernels/ops_internal.h"
#include "kernels/quant_avx2.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_simd_avx2.h"
#include "util/check.h"

namespace omnibus::matmul_act {
namespace {

// Elements [off, off + n) of row `lane` of the input: in place, or the gated
// activation computed into buf (n floats).
const float* input_span(const TileInput& in, int64_t n_in, int64_t lane, int64_t off, int64_t n,
                        float* buf) {
  const size_t at = size_t(lane * n_in + off);
  if (in.gate == Gate::kNone) return in.x + at;
  if (isa() >= Isa::kAvx512) {
    avx512::gated_span(in, at, n, buf);
    return buf;
  }
  if (in.gate == Gate::kSwiglu) {
    swiglu_avx2(in.x + at, in.up + at, buf, n);
  } else {
    geglu_avx2(in.x + at, in.up + at, buf, n);
  }
  return buf;
}

// One block of 32 floats as the reference Q8_0 / Q8_1 quantizers: its qs,
// d (the f32 of its fp16), and where asked the exact sum of qs and s (the
// fp16 of that sum times the unrounded d, as f32).
struct Block32 {
  float d;
  float s = 0.0f;
  int32_t qsum = 0;
};
Block32 quantize_block(const float* xb, bool with_sums, int8_t* qs) {
  const float d = simd::abs_max_32(xb) / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  __m256i sum;
  const __m256i q = simd::quantize_32(xb, id, &sum);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), q);
  // fp16 round trips with F16C (round to nearest even, as fp32_to_fp16)
  Block32 r{_cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT))};
  if (with_sums) {
    r.qsum = simd::hsum_i32(sum);
    r.s = _cvtsh_ss(_cvtss_sh(float(r.qsum) * d, _MM_FROUND_TO_NEAREST_INT));
  }
  return r;
}

}  // namespace

void quantize_tile_k(const TileInput& in, int64_t n_in, int64_t n_valid, ActBlockK* act) {
  if (isa() >= Isa::kAvx512) return avx512::quantize_tile_k(in, n_in, n_valid, act);
  const int64_t nsb = n_in / kQKK;
  std::memset(act, 0, size_t(nsb) * sizeof(ActBlockK));
  alignas(32) float buf[kQKK];
  for (int64_t lane = 0; lane < n_valid; ++lane) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ8_K q;
      quant_avx2::from_float_q8_K(input_span(in, n_in, lane, sb * kQKK, kQKK, buf), &q, kQKK);
      std::memcpy(act[sb].qs[lane], q.qs, kQKK);
      act[sb].d[lane] = q.d;
      std::memcpy(act[sb].bsums[lane], q.bsums, sizeof(q.bsums));
      for (int j = 0; j < 8; ++j)
        act[sb].bsum_pairs[lane][j] = int16_t(q.bsums[2 * j] + q.bsums[2 * j + 1]);
    }
  }
}

void quantize_tile(const TileInput& in, int64_t n_in, int64_t n_valid, bool with_sum,
                   ActBlock32* act, int32_t* qsum) {
  const int64_t nb = n_in / kQK;
  std::memset(act, 0, size_t(nb) * sizeof(ActBlock32));
  if (qsum != nullptr) std::memset(qsum, 0, size_t(nb) * kTok * sizeof(int32_t));
  alignas(32) float buf[kQK];
  for (int64_t lane = 0; lane < n_valid; ++lane) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = input_span(in, n_in, lane, b * kQK, kQK, buf);
      const Block32 q = quantize_block(xb, with_sum || qsum != nullptr, act[b].qs[lane]);
      act[b].d[lane] = q.d;
      if (qsum != nullptr) qsum[b * kTok + lane] = q.qsum;
      if (with_sum) act[b].s[lane] = q.s;
    }
  }
}

void quantize_row1(const TileInput& in, int64_t n_in, bool with_sum, bool with_qsum,
                   ActBlock1* act) {
  OMNIBUS_CHECK(!(with_sum && with_qsum));
  const int64_t nb = n_in / kQK;
  alignas(32) float buf[kQK];
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = input_span(in, n_in, 0, b * kQK, kQK, buf);
    const Block32 q = quantize_block(xb, with_sum || with_qsum, act[b].qs);
    act[b].d = q.d;
    if (with_sum) {
      act[b].s = q.s;
    } else {
      act[b].qsum = q.qsum;  // 0 unless with_qsum
    }
  }
}

}  // namespace omnibus::matmul_act
