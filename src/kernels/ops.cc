// Dispatch of the ops.h kernels to the AVX2 versions when the CPU has them,
// and RoPE (its cost is the angles, computed once per token for all heads;
// the rotation itself is left to the compiler).
#include "kernels/ops.h"

#include <cmath>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops_internal.h"

namespace omnibus {

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  if (cpu_features().use_avx2()) return rms_norm_avx2(x, w, y, n_rows, n, eps);
  rms_norm_ref(x, w, y, n_rows, n, eps);
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  if (cpu_features().use_avx2()) return swiglu_avx2(gate, up, out, n);
  swiglu_ref(gate, up, out, n);
}

void geglu(const float* gate, const float* up, float* out, int64_t n) {
  if (cpu_features().use_avx2()) return geglu_avx2(gate, up, out, n);
  geglu_ref(gate, up, out, n);
}

void silu(const float* x, float* y, int64_t n) {
  if (cpu_features().use_avx2()) return silu_avx2(x, y, n);
  silu_ref(x, y, n);
}

void gelu(const float* x, float* y, int64_t n) {
  if (cpu_features().use_avx2()) return gelu_avx2(x, y, n);
  gelu_ref(x, y, n);
}

void softmax(float* x, int64_t n) {
  if (cpu_features().use_avx2()) return softmax_avx2(x, n);
  softmax_ref(x, n);
}

int64_t argmax(const float* x, int64_t n) {
  if (cpu_features().use_avx2()) return argmax_avx2(x, n);
  return argmax_ref(x, n);
}

float log_sum_exp(const float* x, int64_t n, float max) {
  if (cpu_features().use_avx2()) return log_sum_exp_avx2(x, n, max);
  return log_sum_exp_ref(x, n, max);
}

void add_inplace(float* y, const float* x, int64_t n) {
  if (cpu_features().use_avx2()) return add_inplace_avx2(y, x, n);
  add_inplace_ref(y, x, n);
}

void scale_inplace(float* y, float s, int64_t n) {
  if (cpu_features().use_avx2()) return scale_inplace_avx2(y, s, n);
  scale_inplace_ref(y, s, n);
}

// Same angles and arithmetic as rope_ref (bit-identical results), with the
// cos/sin table built once per token instead of once per head.
void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim,
          const RopeParams& p) {
  check_rope_params(head_dim, p);
  const int half = p.n_rot / 2;
  const float theta_scale = rope_theta_scale(p);
  constexpr int kMaxHalf = 512;
  float cos_buf[kMaxHalf], sin_buf[kMaxHalf];
  std::vector<float> heap;
  float* cs = cos_buf;
  float* sn = sin_buf;
  if (half > kMaxHalf) {
    heap.resize(2 * static_cast<size_t>(half));
    cs = heap.data();
    sn = heap.data() + half;
  }
  const bool neox = p.mode == RopeMode::kNeox;
  for (int64_t t = 0; t < n_tok; ++t) {
    float theta_base = static_cast<float>(pos[t]);
    for (int i = 0; i < half; ++i) {
      const float ff = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0f;
      const float theta = p.freq_scale * (theta_base / ff);
      cs[i] = std::cos(theta) * p.attn_factor;
      sn[i] = std::sin(theta) * p.attn_factor;
      theta_base *= theta_scale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + (t * n_heads + h) * head_dim;
      if (neox) {
        float* x0 = xh;
        float* x1 = xh + half;
        for (int i = 0; i < half; ++i) {
          const float a = x0[i], b = x1[i];
          x0[i] = a * cs[i] - b * sn[i];
          x1[i] = a * sn[i] + b * cs[i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float a = xh[2 * i], b = xh[2 * i + 1];
          xh[2 * i] = a * cs[i] - b * sn[i];
          xh[2 * i + 1] = a * sn[i] + b * cs[i];
        }
      }
    }
  }
}

}  // namespace omnibus
