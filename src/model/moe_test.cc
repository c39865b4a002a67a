// The mixture-of-experts feed-forward (model/moe.h): the router's choice and
// weights on hand-made logits; grouped dispatch bitwise equal to one matmul
// per token and expert, and to each token run alone (batch invariance); the
// whole layer against a double-precision reference of the formula.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

ModelConfig moe_config(int n_embd, int n_expert, int k, int n_ff_exp) {
  ModelConfig c;
  c.n_embd = n_embd;
  c.n_expert = n_expert;
  c.n_expert_used = k;
  c.n_ff_exp = n_ff_exp;
  return c;
}

TEST(MoeRoute, TopKByProbabilityWithNormalisedWeights) {
  const ModelConfig c = moe_config(4, 5, 2, 4);
  MoeBuffers b;
  // token 0: experts 3 and 1 lead; token 1: a tie between 2 and 4 for second place.
  b.router = {0.1f, 2.0f, -1.0f, 3.0f,  0.5f,  //
              4.0f, 0.0f, 1.0f,  -2.0f, 1.0f};
  moe_route(c, 2, b);
  EXPECT_EQ(b.expert, (std::vector<int32_t>{3, 1, 0, 2}));  // the tie goes to the lower id
  const double e3 = std::exp(3.0 - 3.0), e1 = std::exp(2.0 - 3.0);
  EXPECT_NEAR(b.weight[0], e3 / (e3 + e1), 1e-6);
  EXPECT_NEAR(b.weight[1], e1 / (e3 + e1), 1e-6);
  EXPECT_NEAR(b.weight[0] + b.weight[1], 1.0f, 1e-6f);
  const double f0 = 1.0, f2 = std::exp(1.0 - 4.0);
  EXPECT_NEAR(b.weight[2], f0 / (f0 + f2), 1e-6);
  // b.router now holds the softmax probabilities
  double sum = 0;
  for (int e = 0; e < 5; ++e) sum += b.router[size_t(e)];
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

// Random expert weights in `type` (the router in f32), with the float
// matrices kept for the reference.
struct Fixture {
  ModelConfig c;
  std::vector<std::vector<uint8_t>> storage;    // the quantized bytes the views point into
  std::vector<std::vector<float>> dequantized;  // [3 * n_expert + 1] as the kernels see them
  MoeWeights m;

  Fixture(const ModelConfig& config, DType type, uint64_t seed) : c(config) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto make = [&](int64_t n_in, int64_t n_out, DType t, float scale) {
      std::vector<float> w(static_cast<size_t>(n_in * n_out));
      for (float& v : w) v = nd(rng) * scale;
      const size_t row = dtype_row_size(t, n_in);
      std::vector<uint8_t> q(row * size_t(n_out));
      if (t == DType::F32) {
        std::memcpy(q.data(), w.data(), q.size());
      } else {
        EXPECT_NE(dtype_traits(t).from_float, nullptr) << dtype_name(t) << " has no quantizer";
        for (int64_t r = 0; r < n_out; ++r)
          dtype_traits(t).from_float(&w[size_t(r * n_in)], &q[size_t(r) * row], n_in);
      }
      std::vector<float> back(w.size());
      dtype_traits(t).to_float(q.data(), back.data(), int64_t(back.size()));
      storage.push_back(std::move(q));
      dequantized.push_back(std::move(back));
      return pack_weight(WeightView{t, storage.back().data(), n_in, n_out});
    };
    storage.reserve(size_t(3 * c.n_expert + 1));
    m.router = make(c.n_embd, c.n_expert, DType::F32, 2.0f / std::sqrt(float(c.n_embd)));
    for (int e = 0; e < c.n_expert; ++e) {
      m.gate.push_back(make(c.n_embd, c.n_ff_exp, type, 1.0f / std::sqrt(float(c.n_embd))));
      m.up.push_back(make(c.n_embd, c.n_ff_exp, type, 1.0f / std::sqrt(float(c.n_embd))));
      m.down.push_back(make(c.n_ff_exp, c.n_embd, type, 1.0f / std::sqrt(float(c.n_ff_exp))));
    }
  }
};

std::vector<float> random_rows(int64_t n, int n_embd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n * n_embd));
  for (float& v : x) v = nd(rng);
  return x;
}

class MoeDispatchTest : public ::testing::TestWithParam<DType> {};

TEST_P(MoeDispatchTest, GroupedEqualsPerTokenAndEachTokenAlone) {
  const ModelConfig c = moe_config(256, 8, 2, 256);
  Fixture f(c, GetParam(), 3);
  ThreadPool pool(2);
  const int64_t n_tok = 37;
  const std::vector<float> x = random_rows(n_tok, c.n_embd, 4);
  std::vector<float> grouped(x.size()), per_token(x.size());
  MoeBuffers b;
  moe_feed_forward(f.m, c, x.data(), n_tok, grouped.data(), b, pool, MoeDispatch::kGrouped);
  // Several tokens share experts (37 tokens x 2 slots over 8 experts).
  int max_rows = 0;
  for (int e = 0; e < c.n_expert; ++e)
    max_rows = std::max(max_rows, b.offset[size_t(e) + 1] - b.offset[size_t(e)]);
  EXPECT_GE(max_rows, 8);
  moe_feed_forward(f.m, c, x.data(), n_tok, per_token.data(), b, pool, MoeDispatch::kPerToken);
  EXPECT_EQ(grouped, per_token);
  for (int64_t t = 0; t < n_tok; t += 5) {
    std::vector<float> alone(static_cast<size_t>(c.n_embd));
    moe_feed_forward(f.m, c, x.data() + t * c.n_embd, 1, alone.data(), b, pool);
    for (int i = 0; i < c.n_embd; ++i) {
      ASSERT_EQ(alone[size_t(i)], grouped[size_t(t * c.n_embd + i)]) << "token " << t;
    }
  }
}

TEST_P(MoeDispatchTest, MatchesTheFormulaInDouble) {
  const ModelConfig c = moe_config(256, 6, 3, 256);
  Fixture f(c, GetParam(), 5);
  ThreadPool pool(1);
  const int64_t n_tok = 9;
  const std::vector<float> x = random_rows(n_tok, c.n_embd, 6);
  std::vector<float> out(x.size());
  MoeBuffers b;
  moe_feed_forward(f.m, c, x.data(), n_tok, out.data(), b, pool);
  const int n_x = c.n_expert, k = c.n_expert_used, E = c.n_embd, FF = c.n_ff_exp;
  auto matvec = [](const std::vector<float>& w, const double* v, int n_in, int n_out) {
    std::vector<double> y(static_cast<size_t>(n_out));
    for (int r = 0; r < n_out; ++r) {
      double s = 0;
      for (int i = 0; i < n_in; ++i) s += double(w[size_t(r * n_in + i)]) * v[i];
      y[size_t(r)] = s;
    }
    return y;
  };
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<double> xt(x.begin() + t * E, x.begin() + (t + 1) * E);
    std::vector<double> logits = matvec(f.dequantized[0], xt.data(), E, n_x);
    std::vector<int> order(static_cast<size_t>(n_x));
    for (int e = 0; e < n_x; ++e) order[size_t(e)] = e;
    std::sort(order.begin(), order.end(),
              [&](int a, int z) { return logits[size_t(a)] > logits[size_t(z)]; });
    double wsum = 0;
    for (int j = 0; j < k; ++j) wsum += std::exp(logits[size_t(order[size_t(j)])]);
    std::vector<double> want(static_cast<size_t>(E), 0.0);
    for (int j = 0; j < k; ++j) {
      const int e = order[size_t(j)];
      const double wj = std::exp(logits[size_t(e)]) / wsum;
      std::vector<double> g = matvec(f.dequantized[size_t(1 + 3 * e)], xt.data(), E, FF);
      std::vector<double> u = matvec(f.dequantized[size_t(2 + 3 * e)], xt.data(), E, FF);
      for (int i = 0; i < FF; ++i)
        g[size_t(i)] = g[size_t(i)] / (1 + std::exp(-g[size_t(i)])) * u[size_t(i)];
      std::vector<double> y = matvec(f.dequantized[size_t(3 + 3 * e)], g.data(), FF, E);
      for (int i = 0; i < E; ++i) want[size_t(i)] += wj * y[size_t(i)];
    }
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (int i = 0; i < E; ++i) {
      // quantized activations (8-bit) in the kernels: ~1% of the largest output
      ASSERT_NEAR(out[size_t(t * E + i)], want[size_t(i)], 0.02 * scale)
          << "token " << t << " i " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MoeDispatchTest,
                         ::testing::Values(DType::F32, DType::Q8_0, DType::Q4_1, DType::Q5_0),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

}  // namespace
}  // namespace omnibus
