// Element-wise and row-wise kernels of the transformer forward pass.
// Shapes are row-major, innermost dimension last: `[n_rows, n]` means n_rows
// rows of n contiguous floats. Every function has a scalar reference
// (`*_ref`, in ops_ref.cc) and an AVX2 version chosen at run time; tests hold
// them together. Results for one row never depend on other rows (batch
// invariance): reductions run in one fixed order per row.
//
// Agreement with the references: add/scale/rope are bit-identical; rms_norm
// and softmax differ only by summation order (both accumulate in double);
// silu/gelu/swiglu/geglu/softmax use a vectorised exp (ops_vec_avx2.h,
// <= ~3e-7 relative), so they agree to ~1e-6 relative. The AVX2 gelu uses the
// identity 0.5x(1 + tanh(y)) = x / (1 + e^(-2y)), which is more accurate than
// the tanh form for negative x. OMNIBUS_NO_SIMD=1 selects the references.
//
// Thread-safety: pure functions over caller-owned memory; in-place (y == x)
// is allowed where noted.
#pragma once

#include <cstdint>

namespace omnibus {

// y[r, i] = x[r, i] / sqrt(mean_i(x[r, :]^2) + eps) * w[i]   (w may be null: no scale)
// x, y: [n_rows, n]; y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps);

enum class RopeMode {
  kNormal,  // rotate pairs (2i, 2i+1) — llama.cpp LLAMA_ROPE_TYPE_NORM (Llama)
  kNeox,    // rotate pairs (i, i + n_rot/2) — LLAMA_ROPE_TYPE_NEOX (Gemma, Qwen...)
};

struct RopeParams {
  RopeMode mode = RopeMode::kNormal;
  int n_rot = 0;  // rotated dims per head (<= head_dim, even); rest pass through
  float freq_base = 10000.f;
  float freq_scale = 1.f;  // linear position scaling: theta = pos * freq_scale * base^(-2i/n_rot)
  // Per-frequency divisors, [n_rot / 2] or null: theta_i = freq_scale * pos * s^i / f[i]
  // (Llama 3's rope_freqs.weight, Phi-3's LongRoPE short/long factors). Not owned.
  const float* freq_factors = nullptr;
  float attn_factor = 1.f;  // cos and sin are multiplied by it (LongRoPE's magnitude scale)
};

// Rotates, in place, every head of every token by its position.
// x: [n_tok, n_heads, head_dim]; pos: [n_tok]. The angles are computed as
// llama.cpp's ggml_rope does, in float: theta_i = freq_scale * pos * s^i with
// s = powf(freq_base, -2/n_rot) and s^i formed by repeated multiplication,
// then cosf/sinf, so results match it closely; freq_factors and attn_factor
// as ggml_rope_ext applies them (theta / f[i], then cos and sin times
// attn_factor; no YaRN ramp). Dims [n_rot, head_dim) pass through. REQUIRES: 0 < n_rot <= head_dim,
// n_rot even.
void rope(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim,
          const RopeParams& p);

// out[i] = silu(gate[i]) * up[i]; silu(x) = x / (1 + exp(-x)). out may alias gate.
void swiglu(const float* gate, const float* up, float* out, int64_t n);
// out[i] = gelu(gate[i]) * up[i], gelu with the tanh approximation
// (gelu_pytorch_tanh, as Gemma uses). out may alias gate.
void geglu(const float* gate, const float* up, float* out, int64_t n);
void silu(const float* x, float* y, int64_t n);
void gelu(const float* x, float* y, int64_t n);

// In-place numerically stable softmax of x[0..n) (max subtracted; n >= 1).
void softmax(float* x, int64_t n);

// Index of the largest x[i] (ties -> lowest index; NaN never wins; 0 when no
// element beats -inf). For greedy sampling over a vocabulary.
int64_t argmax(const float* x, int64_t n);

// log(sum_i exp(x[i] - max)) + max, the sum in double; `max` is x's largest
// element (finite). The log-softmax normaliser of a logits row. The fast path
// differs from the reference by a few float ulps (its exp).
float log_sum_exp(const float* x, int64_t n, float max);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// y[i] *= s
void scale_inplace(float* y, float s, int64_t n);

// Scalar references (the definition of correct).
void rms_norm_ref(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps);
void rope_ref(float* x, const int32_t* pos, int64_t n_tok, int n_heads, int head_dim,
              const RopeParams& p);
void swiglu_ref(const float* gate, const float* up, float* out, int64_t n);
void geglu_ref(const float* gate, const float* up, float* out, int64_t n);
void silu_ref(const float* x, float* y, int64_t n);
void gelu_ref(const float* x, float* y, int64_t n);
void softmax_ref(float* x, int64_t n);
int64_t argmax_ref(const float* x, int64_t n);
float log_sum_exp_ref(const float* x, int64_t n, float max);
void add_inplace_ref(float* y, const float* x, int64_t n);
void scale_inplace_ref(float* y, float s, int64_t n);

}  // namespace omnibus
