// Micro-benchmarks of matmul on the SmolLM2-135M shapes (Q4_1 projections,
// Q8_0 tied output) at 1..256 tokens, 2 threads. Reports GFLOP/s (2 flops per
// multiply-add), weight GB/s and, for the whole-model sweep, tokens/s.
//
//   ./build/kernels_microbench --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

// range(1) = threads, range(2) = 1: weights packed at load (pack_weight). One-thread runs report
// rates per CPU second of the (only) working thread — stable on a loaded machine; two-thread runs
// use wall time.
ThreadPool& bench_pool(int64_t n_threads) {
  static ThreadPool one(1), two(2);
  return n_threads == 1 ? one : two;
}

void run_shape(benchmark::State& state, DType type, int64_t n_in, int64_t n_out) {
  const int64_t n_tok = state.range(0);
  std::mt19937 rng(1);
  std::vector<uint8_t> wdata = quant_testing::random_rows(type, n_out, n_in, rng);
  std::vector<float> x = quant_testing::random_floats(size_t(n_tok * n_in), rng);
  std::vector<float> y(size_t(n_tok * n_out));
  const WeightView w{type, wdata.data(), n_in, n_out};
  const PackedWeight packed = pack_weight(w);
  const bool use_packed = state.range(2) != 0;
  MatmulScratch scratch;
  for (auto _ : state) {
    if (use_packed) {
      matmul(packed, x.data(), n_tok, y.data(), bench_pool(state.range(1)), scratch);
    } else {
      matmul(w, x.data(), n_tok, y.data(), bench_pool(state.range(1)), scratch);
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = double(state.iterations());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n_in * n_out * n_tok * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(double(wdata.size()) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["tok/s"] = benchmark::Counter(double(n_tok) * iters, benchmark::Counter::kIsRate);
}

void BM_Matmul_Q4_1_576x1536(benchmark::State& s) { run_shape(s, DType::Q4_1, 576, 1536); }
void BM_Matmul_Q4_1_1536x576(benchmark::State& s) { run_shape(s, DType::Q4_1, 1536, 576); }
void BM_Matmul_Q4_1_576x576(benchmark::State& s) { run_shape(s, DType::Q4_1, 576, 576); }
void BM_Matmul_Q4_1_576x192(benchmark::State& s) { run_shape(s, DType::Q4_1, 576, 192); }
void BM_Matmul_Q8_0_576x49152(benchmark::State& s) { run_shape(s, DType::Q8_0, 576, 49152); }
// K-quants need n_in % 256 == 0: 768 stands in for 576.
void BM_Matmul_Q5_0_640x2048(benchmark::State& s) {
  run_shape(s, DType::Q5_0, 640, 2048);
}  // Gemma 3 gate/up
// Common formats the bundled models do not use (Q4_0, Q5_1, Q5_K_M files).
void BM_Matmul_Q4_0_576x1536(benchmark::State& s) { run_shape(s, DType::Q4_0, 576, 1536); }
void BM_Matmul_Q5_1_576x1536(benchmark::State& s) { run_shape(s, DType::Q5_1, 576, 1536); }
void BM_Matmul_Q5_K_768x1536(benchmark::State& s) { run_shape(s, DType::Q5_K, 768, 1536); }
void BM_Matmul_Q2_K_768x1536(benchmark::State& s) {
  run_shape(s, DType::Q2_K, 768, 1536);
}  // generic path
void BM_Matmul_Q3_K_768x1536(benchmark::State& s) {
  run_shape(s, DType::Q3_K, 768, 1536);
}  // generic path
// Unquantized weights (F16 / BF16 GGUFs).
void BM_Matmul_F16_576x1536(benchmark::State& s) { run_shape(s, DType::F16, 576, 1536); }
void BM_Matmul_BF16_576x1536(benchmark::State& s) { run_shape(s, DType::BF16, 576, 1536); }
void BM_Matmul_F16_1536x576(benchmark::State& s) { run_shape(s, DType::F16, 1536, 576); }
void BM_Matmul_F16_576x49152(benchmark::State& s) {
  run_shape(s, DType::F16, 576, 49152);
}  // an F16 output head (DRAM)
void BM_Matmul_Q4_K_768x1536(benchmark::State& s) { run_shape(s, DType::Q4_K, 768, 1536); }
void BM_Matmul_Q6_K_768x1536(benchmark::State& s) { run_shape(s, DType::Q6_K, 768, 1536); }

// {n_tok, threads, packed}
#define OMNIBUS_1T ->ArgsProduct({{1, 2, 4, 5, 8, 16, 64, 256, 512}, {1}, {0, 1}})
#define OMNIBUS_2T ->ArgsProduct({{1, 16, 64, 256}, {2}, {0, 1}})->UseRealTime()
#define OMNIBUS_SHAPE(fn)   \
  BENCHMARK(fn) OMNIBUS_1T; \
  BENCHMARK(fn) OMNIBUS_2T
OMNIBUS_SHAPE(BM_Matmul_Q4_1_576x1536);
OMNIBUS_SHAPE(BM_Matmul_Q4_1_1536x576);
OMNIBUS_SHAPE(BM_Matmul_Q4_1_576x576);
OMNIBUS_SHAPE(BM_Matmul_Q4_1_576x192);
OMNIBUS_SHAPE(BM_Matmul_Q8_0_576x49152);
OMNIBUS_SHAPE(BM_Matmul_Q5_0_640x2048);
OMNIBUS_SHAPE(BM_Matmul_Q4_0_576x1536);
OMNIBUS_SHAPE(BM_Matmul_Q5_1_576x1536);
OMNIBUS_SHAPE(BM_Matmul_Q5_K_768x1536);
OMNIBUS_SHAPE(BM_Matmul_Q2_K_768x1536);
OMNIBUS_SHAPE(BM_Matmul_Q3_K_768x1536);
OMNIBUS_SHAPE(BM_Matmul_F16_576x1536);
OMNIBUS_SHAPE(BM_Matmul_BF16_576x1536);
OMNIBUS_SHAPE(BM_Matmul_F16_1536x576);
OMNIBUS_SHAPE(BM_Matmul_F16_576x49152);
OMNIBUS_SHAPE(BM_Matmul_Q4_K_768x1536);
OMNIBUS_SHAPE(BM_Matmul_Q6_K_768x1536);

// All projection matmuls of SmolLM2-135M's 30 layers (q, k, v, o, gate, up,
// down; distinct weights, ~66 MB of Q4_1, so decode reads from DRAM) — the
// model's matmul throughput without attention, norms and the output head.
// range(2) = 1: weights packed at load (pack_weight), 0: as in the file.
struct SmolLM2Stack {
  std::vector<std::vector<uint8_t>> weights;
  std::vector<WeightView> views;
  std::vector<PackedWeight> packed;
  std::vector<uint8_t> head;  // Q8_0 [49152, 576], the tied output
  WeightView head_view{};
  PackedWeight head_packed;
  double macs = 0;  // per token, projections only

  SmolLM2Stack() {
    struct Shape {
      int64_t n_in, n_out;
    };
    const Shape shapes[] = {{576, 576},  {576, 192},  {576, 192}, {576, 576},
                            {576, 1536}, {576, 1536}, {1536, 576}};
    std::mt19937 rng(2);
    for (int layer = 0; layer < 30; ++layer) {
      for (const Shape& s : shapes) {
        weights.push_back(quant_testing::random_rows(DType::Q4_1, s.n_out, s.n_in, rng));
        views.push_back({DType::Q4_1, weights.back().data(), s.n_in, s.n_out});
        macs += double(s.n_in * s.n_out);
      }
    }
    for (const WeightView& v : views) packed.push_back(pack_weight(v));
    head = quant_testing::random_rows(DType::Q8_0, 49152, 576, rng);
    head_view = {DType::Q8_0, head.data(), 576, 49152};
    head_packed = pack_weight(head_view);
  }
  // Every projection of the layers on x, packed or as views.
  void run_layers(bool use_packed, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                  MatmulScratch& scratch) const {
    for (size_t i = 0; i < views.size(); ++i) {
      if (use_packed) {
        matmul(packed[i], x, n_tok, y, pool, scratch);
      } else {
        matmul(views[i], x, n_tok, y, pool, scratch);
      }
    }
  }
  static const SmolLM2Stack& get() {
    static const SmolLM2Stack s;
    return s;
  }
};

void BM_Matmul_SmolLM2_Layers(benchmark::State& state) {
  const int64_t n_tok = state.range(0);
  const bool use_packed = state.range(2) != 0;
  const SmolLM2Stack& m = SmolLM2Stack::get();
  std::mt19937 rng(3);
  std::vector<float> x = quant_testing::random_floats(size_t(n_tok * 1536), rng);
  std::vector<float> y(size_t(n_tok * 1536));
  MatmulScratch scratch;
  ThreadPool& pool = bench_pool(state.range(1));
  for (auto _ : state) {
    m.run_layers(use_packed, x.data(), n_tok, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = double(state.iterations());
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m.macs * n_tok * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["tok/s"] = benchmark::Counter(double(n_tok) * iters, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul_SmolLM2_Layers)->ArgsProduct({{1, 16, 64, 256}, {1}, {0, 1}});
BENCHMARK(BM_Matmul_SmolLM2_Layers)->ArgsProduct({{1, 16, 64, 512}, {2}, {0, 1}})->UseRealTime();

// The whole stack as a step of the engine sees it: the 210 projections plus
// the Q8_0 output head on every token of a decode batch (n_tok <= 64), or on
// the last token of a prompt chunk (n_tok > 64). Weights packed when range(2).
void BM_SmolLM2_Step(benchmark::State& state) {
  const int64_t n_tok = state.range(0);
  const bool use_packed = state.range(2) != 0;
  const int64_t head_rows = n_tok <= 64 ? n_tok : 1;
  const SmolLM2Stack& m = SmolLM2Stack::get();
  std::mt19937 rng(4);
  std::vector<float> x = quant_testing::random_floats(size_t(n_tok * 1536), rng);
  std::vector<float> y(size_t(n_tok * 1536)), logits(size_t(head_rows * 49152));
  MatmulScratch scratch;
  ThreadPool& pool = bench_pool(state.range(1));
  for (auto _ : state) {
    m.run_layers(use_packed, x.data(), n_tok, y.data(), pool, scratch);
    if (use_packed) {
      matmul(m.head_packed, x.data(), head_rows, logits.data(), pool, scratch);
    } else {
      matmul(m.head_view, x.data(), head_rows, logits.data(), pool, scratch);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(double(n_tok) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SmolLM2_Step)->ArgsProduct({{1, 16, 64, 512}, {1}, {0, 1}});
BENCHMARK(BM_SmolLM2_Step)->ArgsProduct({{1, 16, 64, 512}, {2}, {0, 1}})->UseRealTime();

}  // namespace
}  // namespace omnibus
