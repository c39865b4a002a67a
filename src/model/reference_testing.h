// Tests only: what the forward-pass tests of every architecture share — a
// tiny GGUF loaded as a Model, and the double-precision building blocks of the
// naive references written from each architecture's definition
// (llama_test.cc, gemma3_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "model/model.h"

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
inline double max_abs_diff(std::span<const float> got, const std::vector<std::vector<double>>& want) {
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

}  // namespace omnibus::reference
