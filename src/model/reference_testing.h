// Tests only: what the forward-pass tests of every architecture share — a
// tiny GGUF loaded as a Model, and the double-precision building blocks of the
// naive references written from each architecture's definition
// (llama_test.cc, gemma3_test.cc), and the checks they share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "model/sequence_runner_testing.h"

namespace omnibus::reference {

struct Loaded {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;
};

// A GGUF image (e.g. from make_tiny_*_gguf) loaded as a model.
inline Loaded load_bytes(const std::vector<uint8_t>& bytes, int threads = 2) {
  auto file = GgufFile::from_bytes(bytes.data(), bytes.size(), "tiny.gguf");
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  Loaded l;
  l.file = std::move(file).value();
  l.pool = std::make_unique<ThreadPool>(threads);
  auto model = load_model(l.file, *l.pool);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  l.model = std::move(model).value();
  return l;
}

// Dequantized copy of a tensor (a [n_in, n_out] matrix: n_out rows of n_in).
inline std::vector<double> dequant(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  std::vector<float> tmp(size_t(t->n_elements));
  dtype_traits_ref(t->type).to_float(t->data, tmp.data(), t->n_elements);
  return std::vector<double>(tmp.begin(), tmp.end());
}

// y[r] = sum_k W[r, k] x[k]
inline std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x,
                                  size_t n_out) {
  const size_t n_in = x.size();
  std::vector<double> y(n_out, 0.0);
  for (size_t r = 0; r < n_out; ++r)
    for (size_t k = 0; k < n_in; ++k) y[r] += w[r * n_in + k] * x[k];
  return y;
}

// x / sqrt(mean(x^2) + eps) * w
inline std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w,
                                    double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

inline std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& v : t) v = int32_t(rng() % uint64_t(n_vocab));
  return t;
}

// Max |a - b| over all positions; got: [want.size(), V].
inline double max_abs_diff(std::span<const float> got,
                           const std::vector<std::vector<double>>& want) {
  double m = 0;
  const size_t V = want[0].size();
  for (size_t t = 0; t < want.size(); ++t)
    for (size_t i = 0; i < V; ++i) m = std::max(m, std::abs(double(got[t * V + i]) - want[t][i]));
  return m;
}

// Max |v| over all positions.
inline double max_abs(const std::vector<std::vector<double>>& rows) {
  double m = 0;
  for (const auto& row : rows)
    for (double v : row) m = std::max(m, std::abs(v));
  return m;
}

// Two random prompts (20 and 33 tokens, seeds seed and seed + 1) give bitwise
// the same last-token logits alone as when they share one step.
inline void expect_sharing_a_step_changes_no_bit(Model& model, int n_vocab, uint64_t seed) {
  auto kv = KvStorage::create(model.kv_geometry(16, KvFormat::kF16), 16);
  ASSERT_TRUE(kv.is_ok());
  const auto ta = random_tokens(20, n_vocab, seed), tb = random_tokens(33, n_vocab, seed + 1);
  const std::vector<int32_t> blocks_a = {3, 1}, blocks_b = {7, 0, 12};
  using Seq = std::pair<const std::vector<int32_t>*, const std::vector<int32_t>*>;
  auto run = [&](const std::vector<Seq>& seqs) {  // (tokens, block table) from position 0
    StepBatch batch;
    for (auto [tokens, blocks] : seqs) {
      batch.tokens.insert(batch.tokens.end(), tokens->begin(), tokens->end());
      batch.seqs.push_back(
          StepSeq{int32_t(tokens->size()), 0, blocks->data(), int32_t(blocks->size()), false});
    }
    auto logits = model.forward(batch, **kv);
    return std::vector<float>(logits.begin(), logits.end());
  };
  const std::vector<float> alone_a = run({{&ta, &blocks_a}});
  const std::vector<float> alone_b = run({{&tb, &blocks_b}});
  const std::vector<float> both = run({{&ta, &blocks_a}, {&tb, &blocks_b}});
  const size_t V = size_t(n_vocab);
  ASSERT_EQ(both.size(), 2 * V);
  EXPECT_EQ(std::memcmp(both.data(), alone_a.data(), V * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(both.data() + V, alone_b.data(), V * sizeof(float)), 0);
}

// `tokens` evaluated whole and in chunks of each size in `chunks` (a fresh
// SequenceRunner each, F16 KV) give bitwise the same logits at every position.
// The whole prompt runs as one step (`whole` tokens at most).
inline void expect_chunking_changes_no_bit(Model& model, const std::vector<int32_t>& tokens,
                                           const std::vector<int>& chunks, int whole = 512) {
  auto eval = [&](int max_chunk) {
    auto runner = SequenceRunner::create(model, int(tokens.size()) + 16);
    EXPECT_TRUE(runner.is_ok());
    auto logits = (*runner)->eval(tokens, /*all_logits=*/true, max_chunk);
    EXPECT_TRUE(logits.is_ok());
    return std::vector<float>(logits->begin(), logits->end());
  };
  const std::vector<float> ref = eval(whole);
  for (int chunk : chunks) {
    const std::vector<float> got = eval(chunk);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0)
        << "chunk " << chunk;
  }
}

// Loading `bytes` with the character at needle[at] of the first occurrence
// of a tensor name `needle` replaced by `c` fails, naming the tensor.
inline void expect_load_names_missing_tensor(std::vector<uint8_t> bytes, const std::string& needle,
                                             size_t at, char c) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  ASSERT_NE(it, bytes.end());
  *(it + std::ptrdiff_t(at)) = uint8_t(c);
  auto file = GgufFile::from_bytes(bytes.data(), bytes.size(), "tiny.gguf");
  ASSERT_TRUE(file.is_ok());
  ThreadPool pool(1);
  auto model = load_model(std::shared_ptr<const GgufFile>(std::move(file).value()), pool);
  ASSERT_FALSE(model.is_ok());
  EXPECT_NE(model.status().message().find(needle), std::string::npos) << model.status().to_string();
}

}  // namespace omnibus::reference
