// Scalar reference kernels of ops.h: the definition of correct. Formulas
// follow ggml's CPU ops (double accumulation in rms_norm and softmax, the
// tanh form of gelu, RoPE angles by repeated multiplication) so results stay
// close to llama.cpp's.
#include <cmath>
#include <limits>

#include "kernels/ops.h"
#include "kernels/ops_internal.h"
#include "util/check.h"

namespace omnibus {

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps) {
  OMNIBUS_CHECK(n > 0 && n_rows >= 0);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) {
      const float v = xr[i] * scale;
      yr[i] = w ? v * w[i] : v;
    }
  }
}

void rope_ref(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim,
              const RopeParams& p) {
  check_rope_params(head_dim, p);
  const int half = p.n_rot / 2;
  const float theta_scale = rope_theta_scale(p);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      float* xh = x + (t * n_heads + h) * head_dim;
      float theta_base = static_cast<float>(pos[t]);
      for (int i = 0; i < half; ++i) {
        const float ff = p.freq_factors != nullptr ? p.freq_factors[i] : 1.0f;
        const float theta = p.freq_scale * (theta_base / ff);
        const float c = std::cos(theta) * p.attn_factor;
        const float s = std::sin(theta) * p.attn_factor;
        theta_base *= theta_scale;
        const int i0 = p.mode == RopeMode::kNormal ? 2 * i : i;
        const int i1 = p.mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
        const float x0 = xh[i0];
        const float x1 = xh[i1];
        xh[i0] = x0 * c - x1 * s;
        xh[i1] = x0 * s + x1 * c;
      }
    }
  }
}

static inline float silu1(float x) { return x / (1.0f + std::exp(-x)); }

static inline float gelu1(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

void swiglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu1(gate[i]) * up[i];
}

void geglu_ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu1(gate[i]) * up[i];
}

void silu_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu1(x[i]);
}

void gelu_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu1(x[i]);
}

void softmax_ref(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

int64_t argmax_ref(const float* x, int64_t n) {
  int64_t best = 0;
  float best_x = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > best_x) {  // strict: ties keep the lower index; NaN never wins
      best_x = x[i];
      best = i;
    }
  }
  return best;
}

float log_sum_exp_ref(const float* x, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  return max + static_cast<float>(std::log(sum));
}

void add_inplace_ref(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_inplace_ref(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

}  // namespace omnibus
