// The Gemma 3 forward pass against a naive double-precision reference written
// from the architecture's definition (gemma3.h), on tiny random-weight GGUF
// models whose sequences run past the sliding window; the metadata it reads;
// and the batch-invariance properties the engine relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/reference_testing.h"
#include "model/sequence_runner_testing.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

using reference::dequant;
using reference::Loaded;
using reference::matvec;
using reference::max_abs;
using reference::max_abs_diff;
using reference::random_tokens;
using reference::rms_norm;

Loaded load_tiny(const TinyGemma3Spec& spec, uint64_t seed) {
  return reference::load_bytes(make_tiny_gemma3_gguf(spec, seed));
}

// NeoX RoPE of one head, in place: pairs (i, i + d/2).
void rope_neox(double* x, int head_dim, int pos, double base) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double theta = pos * std::pow(base, -2.0 * i / head_dim);
    const double c = std::cos(theta), s = std::sin(theta);
    const double a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

bool is_sliding(const TinyGemma3Spec& s, int il) {
  const int period = s.swa_pattern > 0 ? s.swa_pattern : 6;
  return s.sliding_window > 0 && il % period < period - 1;
}

// Logits of every position, [tokens.size()][n_vocab], from the definition.
// use_window = false ignores the sliding window (to show that it matters).
std::vector<std::vector<double>> reference_forward(const GgufFile& f, const TinyGemma3Spec& s,
                                                   const std::vector<int32_t>& tokens,
                                                   bool use_window = true) {
  const int T = int(tokens.size()), E = s.n_embd, hd = s.head_dim;
  const int group = s.n_head / s.n_head_kv;
  const double eps = 1e-6;
  const std::vector<double> embd = dequant(f, "token_embd.weight");
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    x[size_t(t)].assign(embd.begin() + int64_t(tokens[size_t(t)]) * E,
                        embd.begin() + int64_t(tokens[size_t(t)] + 1) * E);
    for (double& v : x[size_t(t)]) v *= std::sqrt(double(E));
  }
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const bool sliding = is_sliding(s, il);
    const double base = sliding ? (s.rope_base_swa > 0 ? s.rope_base_swa : 10000.0) : s.rope_base;
    const auto wq = dequant(f, p + "attn_q.weight"), wk = dequant(f, p + "attn_k.weight"),
               wv = dequant(f, p + "attn_v.weight"), wo = dequant(f, p + "attn_output.weight"),
               wg = dequant(f, p + "ffn_gate.weight"), wu = dequant(f, p + "ffn_up.weight"),
               wd = dequant(f, p + "ffn_down.weight"), an = dequant(f, p + "attn_norm.weight"),
               qn = dequant(f, p + "attn_q_norm.weight"), kn = dequant(f, p + "attn_k_norm.weight"),
               pan = dequant(f, p + "post_attention_norm.weight"),
               fn = dequant(f, p + "ffn_norm.weight"), pfn = dequant(f, p + "post_ffw_norm.weight");
    std::vector<std::vector<double>> q(size_t(T) * s.n_head), k(size_t(T) * s.n_head_kv),
        v(size_t(T) * s.n_head_kv);
    for (int t = 0; t < T; ++t) {
      const auto h = rms_norm(x[size_t(t)], an, eps);
      const auto qa = matvec(wq, h, size_t(s.n_head * hd));
      const auto ka = matvec(wk, h, size_t(s.n_head_kv * hd));
      const auto va = matvec(wv, h, size_t(s.n_head_kv * hd));
      for (int hh = 0; hh < s.n_head; ++hh) {
        auto& qh = q[size_t(t * s.n_head + hh)];
        qh = rms_norm(std::vector<double>(qa.begin() + hh * hd, qa.begin() + (hh + 1) * hd), qn,
                      eps);
        rope_neox(qh.data(), hd, t, base);
      }
      for (int hh = 0; hh < s.n_head_kv; ++hh) {
        auto& kh = k[size_t(t * s.n_head_kv + hh)];
        kh = rms_norm(std::vector<double>(ka.begin() + hh * hd, ka.begin() + (hh + 1) * hd), kn,
                      eps);
        rope_neox(kh.data(), hd, t, base);
        v[size_t(t * s.n_head_kv + hh)].assign(va.begin() + hh * hd, va.begin() + (hh + 1) * hd);
      }
    }
    for (int t = 0; t < T; ++t) {
      // Sliding layers: the query at t sees keys (t - window, t].
      const int first = sliding && use_window ? std::max(0, t - s.sliding_window + 1) : 0;
      std::vector<double> attn(size_t(s.n_head * hd), 0.0);
      for (int hh = 0; hh < s.n_head; ++hh) {
        const int kvh = hh / group;
        const auto& qh = q[size_t(t * s.n_head + hh)];
        std::vector<double> score;
        double mx = -1e300;
        for (int j = first; j <= t; ++j) {
          const auto& kj = k[size_t(j * s.n_head_kv + kvh)];
          double d = 0;
          for (int i = 0; i < hd; ++i) d += qh[size_t(i)] * kj[size_t(i)];
          score.push_back(d / std::sqrt(double(hd)));
          mx = std::max(mx, score.back());
        }
        double sum = 0;
        for (double& sc : score) sum += (sc = std::exp(sc - mx));
        for (int j = first; j <= t; ++j)
          for (int i = 0; i < hd; ++i)
            attn[size_t(hh * hd + i)] +=
                score[size_t(j - first)] / sum * v[size_t(j * s.n_head_kv + kvh)][size_t(i)];
      }
      const auto o = rms_norm(matvec(wo, attn, size_t(E)), pan, eps);
      for (int i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const auto h = rms_norm(x[size_t(t)], fn, eps);
      auto g = matvec(wg, h, size_t(s.n_ff));
      const auto u = matvec(wu, h, size_t(s.n_ff));
      for (int i = 0; i < s.n_ff; ++i) g[size_t(i)] = gelu_tanh(g[size_t(i)]) * u[size_t(i)];
      const auto d = rms_norm(matvec(wd, g, size_t(E)), pfn, eps);
      for (int i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
    }
  }
  const auto on = dequant(f, "output_norm.weight");
  std::vector<std::vector<double>> logits;
  for (int t = 0; t < T; ++t) {
    auto row = matvec(embd, rms_norm(x[size_t(t)], on, eps), size_t(s.n_vocab));
    if (s.final_softcap > 0) {
      for (double& l : row) l = s.final_softcap * std::tanh(l / s.final_softcap);
    }
    logits.push_back(std::move(row));
  }
  return logits;
}

std::vector<float> eval_all(Model& model, const std::vector<int32_t>& tokens, KvFormat kv_format,
                            int max_chunk = 512) {
  auto runner = SequenceRunner::create(model, 64, kv_format, 16);
  EXPECT_TRUE(runner.is_ok());
  auto logits = (*runner)->eval(tokens, /*all_logits=*/true, max_chunk);
  EXPECT_TRUE(logits.is_ok());
  return std::vector<float>(logits->begin(), logits->end());
}

TEST(Gemma3Config, ReadsLayerPatternRopeBasesAndScale) {
  TinyGemma3Spec spec;
  spec.n_layer = 7;
  Loaded l = load_tiny(spec, 1);
  const ModelConfig& c = l.model->config();
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_q(), 128);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_is_swa, (std::vector<bool>{true, true, false, true, true, false, true}));
  EXPECT_EQ(c.rope.mode, RopeMode::kNeox);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_freq_base_local, 1e4f);
  EXPECT_FLOAT_EQ(c.query_scale(), 1.0f / std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.final_logit_softcap, 0.f);

  // Without the pattern key: every 6th layer is global; base_swa defaults to 10000.
  spec.swa_pattern = 0;
  spec.rope_base_swa = 0;
  spec.final_softcap = 30.f;
  Loaded d = load_tiny(spec, 1);
  EXPECT_EQ(d.model->config().layer_is_swa,
            (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_FLOAT_EQ(d.model->config().rope_freq_base_local, 10000.f);
  EXPECT_FLOAT_EQ(d.model->config().final_logit_softcap, 30.f);

  // No sliding window: no sliding layers.
  spec.sliding_window = 0;
  Loaded g = load_tiny(spec, 1);
  EXPECT_FALSE(g.model->config().is_swa_layer(0));
}

TEST(Gemma3Forward, MatchesReferenceWithF32Weights) {
  TinyGemma3Spec spec;
  Loaded l = load_tiny(spec, 1);
  const auto tokens = random_tokens(37, spec.n_vocab, 2);
  const std::vector<float> got = eval_all(*l.model, tokens, KvFormat::kF32);
  const auto want = reference_forward(*l.file, spec, tokens);
  // f32 weights, activations and KV: only float rounding separates the two.
  // Measured 9e-7 on a logit range of 4.2.
  EXPECT_LT(max_abs_diff(got, want), 1e-4) << "logit range " << max_abs(want);
  // The window matters at these lengths: ignoring it is far off.
  EXPECT_GT(max_abs_diff(got, reference_forward(*l.file, spec, tokens, false)), 0.05);
}

TEST(Gemma3Forward, MatchesReferenceWithSoftcapAndDefaultPattern) {
  TinyGemma3Spec spec;
  spec.n_layer = 7;  // layer 5 global, the rest sliding
  spec.swa_pattern = 0;
  spec.final_softcap = 2.f;  // small enough to bend the logits
  Loaded l = load_tiny(spec, 3);
  const auto tokens = random_tokens(30, spec.n_vocab, 4);
  const std::vector<float> got = eval_all(*l.model, tokens, KvFormat::kF32);
  const auto want = reference_forward(*l.file, spec, tokens);
  EXPECT_LT(max_abs_diff(got, want), 1e-4);
  for (float v : got) EXPECT_LT(std::abs(v), 2.f);
}

TEST(Gemma3Forward, MatchesReferenceWithQuantizedWeightsAndF16Cache) {
  TinyGemma3Spec spec;
  spec.weight_type = DType::Q5_0;
  spec.embd_type = DType::Q8_0;
  spec.n_embd = 128;
  spec.n_ff = 256;
  Loaded l = load_tiny(spec, 5);
  const auto tokens = random_tokens(29, spec.n_vocab, 6);
  const std::vector<float> got = eval_all(*l.model, tokens, KvFormat::kF16);
  const auto want = reference_forward(*l.file, spec, tokens);
  // Activations are quantized to 8 bits before every matmul (as llama.cpp
  // does) and K/V are stored as f16: measured 0.037 on a logit range of 8.2.
  // A wrong kernel or a missed norm is off by far more.
  const double range = max_abs(want);
  EXPECT_LT(max_abs_diff(got, want), 0.02 * range) << "logit range " << range;
}

}  // namespace
}  // namespace omnibus
