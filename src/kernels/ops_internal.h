// Internal to the ops kernels (ops.cc, ops_ref.cc, ops_avx2.cc): the AVX2
// entry points that ops.cc dispatches to, and the RoPE angle helpers shared by
// the reference and the fast path so both compute bit-identical angles.
// Not part of the kernels API; model code uses ops.h.
//
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/ops.h"
#include "util/check.h"

namespace omnibus {

// REQUIRES: cpu_features().use_avx2(). Same contracts as the ops.h functions.
void rms_norm_avx2(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void geglu_avx2(const float* gate, const float* up, float* out, int64_t n);
void silu_avx2(const float* x, float* y, int64_t n);
void gelu_avx2(const float* x, float* y, int64_t n);
void softmax_avx2(float* x, int64_t n);
int64_t argmax_avx2(const float* x, int64_t n);
float log_sum_exp_avx2(const float* x, int64_t n, float max);
void add_inplace_avx2(float* y, const float* x, int64_t n);
void scale_inplace_avx2(float* y, float s, int64_t n);

inline void check_rope_params(int head_dim, const RopeParams& p) {
  OMNIBUS_CHECK(p.n_rot > 0 && p.n_rot <= head_dim && p.n_rot % 2 == 0);
}

// Ratio between successive pair frequencies: base^(-2/n_rot), in float.
inline float rope_theta_scale(const RopeParams& p) {
  return std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
}

}  // namespace omnibus
