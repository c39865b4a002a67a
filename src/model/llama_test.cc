// The Llama forward pass against a naive double-precision reference written
// from the architecture's definition, on tiny random-weight GGUF models; and
// the batch-invariance properties the engine relies on (chunking and sharing a
// step with other sequences change no bit of the logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "model/reference_testing.h"
#include "model/sequence_runner_testing.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

using reference::dequant;
using reference::Loaded;
using reference::matvec;
using reference::max_abs_diff;
using reference::random_tokens;
using reference::rms_norm;

Loaded load_tiny(const TinyLlamaSpec& spec, uint64_t seed, int threads = 2) {
  return reference::load_bytes(make_tiny_llama_gguf(spec, seed), threads);
}

// Normal (interleaved-pair) RoPE of one head, in place.
void rope(double* x, int head_dim, int pos, double base) {
  for (int i = 0; i < head_dim; i += 2) {
    const double theta = pos * std::pow(base, -double(i) / head_dim);
    const double c = std::cos(theta), s = std::sin(theta);
    const double a = x[i], b = x[i + 1];
    x[i] = a * c - b * s;
    x[i + 1] = a * s + b * c;
  }
}

// Logits of every position, [tokens.size()][n_vocab], straight from the definition.
std::vector<std::vector<double>> reference_forward(const GgufFile& f, const TinyLlamaSpec& s,
                                                   const std::vector<int32_t>& tokens) {
  const int T = int(tokens.size()), E = s.n_embd, hd = s.n_embd / s.n_head;
  const int group = s.n_head / s.n_head_kv;
  const double eps = 1e-5;
  const std::vector<double> embd = dequant(f, "token_embd.weight");
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t)
    x[size_t(t)].assign(embd.begin() + int64_t(tokens[size_t(t)]) * E,
                        embd.begin() + int64_t(tokens[size_t(t)] + 1) * E);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const auto wq = dequant(f, p + "attn_q.weight"), wk = dequant(f, p + "attn_k.weight"),
               wv = dequant(f, p + "attn_v.weight"), wo = dequant(f, p + "attn_output.weight"),
               wg = dequant(f, p + "ffn_gate.weight"), wu = dequant(f, p + "ffn_up.weight"),
               wd = dequant(f, p + "ffn_down.weight"), an = dequant(f, p + "attn_norm.weight"),
               fn = dequant(f, p + "ffn_norm.weight");
    std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)),
        v(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      const auto h = rms_norm(x[size_t(t)], an, eps);
      q[size_t(t)] = matvec(wq, h, size_t(s.n_head * hd));
      k[size_t(t)] = matvec(wk, h, size_t(s.n_head_kv * hd));
      v[size_t(t)] = matvec(wv, h, size_t(s.n_head_kv * hd));
      for (int hh = 0; hh < s.n_head; ++hh) rope(q[size_t(t)].data() + hh * hd, hd, t, s.rope_base);
      for (int hh = 0; hh < s.n_head_kv; ++hh)
        rope(k[size_t(t)].data() + hh * hd, hd, t, s.rope_base);
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> attn(size_t(s.n_head * hd), 0.0);
      for (int hh = 0; hh < s.n_head; ++hh) {
        const int kvh = hh / group;
        std::vector<double> score(size_t(t + 1));
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += q[size_t(t)][size_t(hh * hd + i)] * k[size_t(j)][size_t(kvh * hd + i)];
          score[size_t(j)] = d / std::sqrt(double(hd));
          mx = std::max(mx, score[size_t(j)]);
        }
        double sum = 0;
        for (double& sc : score) sum += (sc = std::exp(sc - mx));
        for (int j = 0; j <= t; ++j)
          for (int i = 0; i < hd; ++i)
            attn[size_t(hh * hd + i)] +=
                score[size_t(j)] / sum * v[size_t(j)][size_t(kvh * hd + i)];
      }
      const auto o = matvec(wo, attn, size_t(E));
      for (int i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const auto h = rms_norm(x[size_t(t)], fn, eps);
      auto g = matvec(wg, h, size_t(s.n_ff));
      const auto u = matvec(wu, h, size_t(s.n_ff));
      for (int i = 0; i < s.n_ff; ++i)
        g[size_t(i)] = g[size_t(i)] / (1 + std::exp(-g[size_t(i)])) * u[size_t(i)];
      const auto d = matvec(wd, g, size_t(E));
      for (int i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
    }
  }
  const auto on = dequant(f, "output_norm.weight");
  const auto out = s.tied_output ? embd : dequant(f, "output.weight");
  std::vector<std::vector<double>> logits;
  for (int t = 0; t < T; ++t)
    logits.push_back(matvec(out, rms_norm(x[size_t(t)], on, eps), size_t(s.n_vocab)));
  return logits;
}

TEST(LlamaForward, MatchesReferenceWithF32Weights) {
  TinyLlamaSpec spec;
  Loaded l = load_tiny(spec, 1);
  const auto tokens = random_tokens(37, spec.n_vocab, 2);
  auto runner = SequenceRunner::create(*l.model, 64, KvFormat::kF32, 16);
  ASSERT_TRUE(runner.is_ok());
  auto logits = (*runner)->eval(tokens, /*all_logits=*/true);
  ASSERT_TRUE(logits.is_ok());
  const auto want = reference_forward(*l.file, spec, tokens);
  // f32 weights and activations, f32 KV: only float rounding separates the two.
  EXPECT_LT(max_abs_diff(*logits, want), 2e-3);
}

// A tiny model with `weight_type` projections and `embd_type` embeddings
// (128 wide), all logits of a random prompt over an f16 cache against the
// double reference: within 8% of the logit range. Activations are quantized
// to 8 bits before every matmul (as llama.cpp does): about 0.35% of the
// output's magnitude per matmul (measured), which random weights amplify
// through the layers to 2-5% of the logit range (measured max 1.18 on a range
// of 22 for Q4_1). A wrong kernel is off by far more.
void expect_close_to_reference(DType weight_type, DType embd_type, uint64_t model_seed,
                               int n_tokens, uint64_t token_seed) {
  SCOPED_TRACE(dtype_name(weight_type));
  TinyLlamaSpec spec;
  spec.weight_type = weight_type;
  spec.embd_type = embd_type;
  spec.n_embd = 128;
  spec.n_ff = 256;
  Loaded l = load_tiny(spec, model_seed);
  const auto tokens = random_tokens(n_tokens, spec.n_vocab, token_seed);
  auto runner = SequenceRunner::create(*l.model, 64, KvFormat::kF16, 16);
  ASSERT_TRUE(runner.is_ok());
  auto logits = (*runner)->eval(tokens, true);
  ASSERT_TRUE(logits.is_ok());
  const auto want = reference_forward(*l.file, spec, tokens);
  double range = 0;
  for (const auto& row : want)
    for (double v : row) range = std::max(range, std::abs(v));
  const double err = max_abs_diff(*logits, want);
  EXPECT_LT(err, 0.08 * range) << "logit range " << range;
  const std::string_view name = dtype_name(weight_type);
  std::printf("%.*s weights: max |logit diff| %.4f on a range of %.2f\n", int(name.size()),
              name.data(), err, range);
}

TEST(LlamaForward, MatchesReferenceWithQuantizedWeightsAndF16Cache) {
  expect_close_to_reference(DType::Q4_1, DType::Q8_0, 3, 29, 4);
}

// The other weight formats with a kernel of their own (F16, BF16 in float
// tiles; Q4_0, Q5_1 packed int8), embeddings in the same format: the same
// bound, which the 8-bit (or bf16) activations account for.
TEST(LlamaForward, MatchesReferenceWithOtherWeightTypes) {
  for (DType type : {DType::F16, DType::BF16, DType::Q4_0, DType::Q5_1}) {
    expect_close_to_reference(type, type, 5, 23, 6);
  }
}

}  // namespace
}  // namespace omnibus
