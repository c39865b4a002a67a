// The mixture-of-experts layer (model/moe.h): experts grouped per step (one
// matmul per expert over all its tokens) against one matmul per token and
// expert, on a layer shaped like a scaled-down Qwen3-30B-A3B (n_embd 1024, 32
// experts of 512, 4 per token, Q4_1 experts), 2 threads.
//
//   build/model_microbench --benchmark_filter=Moe
//
// tokens/s is the counter to compare; docs/models.md has the table.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "model/moe.h"

namespace omnibus {
namespace {

struct Layer {
  ModelConfig c;
  std::vector<std::vector<uint8_t>> bytes;
  MoeWeights m;

  Layer() {
    c.n_embd = 1024;
    c.n_expert = 32;
    c.n_expert_used = 4;
    c.n_ff_exp = 512;
    std::mt19937_64 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    bytes.reserve(size_t(3 * c.n_expert + 1));
    auto make = [&](int64_t n_in, int64_t n_out, DType t) {
      std::vector<float> w(static_cast<size_t>(n_in * n_out));
      for (float& v : w) v = nd(rng) / std::sqrt(float(n_in));
      const size_t row = dtype_row_size(t, n_in);
      std::vector<uint8_t> q(row * size_t(n_out));
      for (int64_t r = 0; r < n_out; ++r) {
        dtype_traits(t).from_float(&w[size_t(r * n_in)], &q[size_t(r) * row], n_in);
      }
      bytes.push_back(std::move(q));
      return pack_weight(WeightView{t, bytes.back().data(), n_in, n_out});
    };
    m.router = make(c.n_embd, c.n_expert, DType::F32);
    for (int e = 0; e < c.n_expert; ++e) {
      m.gate.push_back(make(c.n_embd, c.n_ff_exp, DType::Q4_1));
      m.up.push_back(make(c.n_embd, c.n_ff_exp, DType::Q4_1));
      m.down.push_back(make(c.n_ff_exp, c.n_embd, DType::Q4_1));
    }
  }
};

void run(benchmark::State& state, MoeDispatch dispatch) {
  static Layer layer;
  static ThreadPool pool(2);
  const int64_t n_tok = state.range(0);
  std::mt19937_64 rng(2);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n_tok * layer.c.n_embd)), out(x.size());
  for (float& v : x) v = nd(rng);
  MoeBuffers b;
  for (auto _ : state) {
    moe_feed_forward(layer.m, layer.c, x.data(), n_tok, out.data(), b, pool, dispatch);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double(n_tok), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MoeGrouped(benchmark::State& s) { run(s, MoeDispatch::kGrouped); }
void BM_MoePerToken(benchmark::State& s) { run(s, MoeDispatch::kPerToken); }
BENCHMARK(BM_MoeGrouped)->Arg(1)->Arg(16)->Arg(64)->Arg(256)->UseRealTime();
BENCHMARK(BM_MoePerToken)->Arg(1)->Arg(16)->Arg(64)->Arg(256)->UseRealTime();

}  // namespace
}  // namespace omnibus
