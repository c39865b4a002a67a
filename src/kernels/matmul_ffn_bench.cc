// Micro-benchmark of a gated feed-forward block's three matmuls
// (matmul_gated_ffn) at the shapes of Llama 3.2 1B (2048 -> 8192 -> 2048)
// and Llama 3.1 8B (4096 -> 14336 -> 4096), Q4_K gate / up and Q6_K down as
// in their Q4_K_M files, against the same block unfused (both products
// written out, the activation made as the down projection quantizes them):
//
//   kernels_microbench --benchmark_filter='GatedFfn'
//
// Arguments: n_tok / threads / fused (1: matmul_gated_ffn, which on the amx
// tier runs gated quads for more than 8 tokens; 0: matmul_shared_input then
// matmul_gated). Same bits either way (kernels/matmul_gated_ffn_test.cc).
// The blocks are packed into enough copies to fill 256 MiB, used in turn, so
// that the weights stream from DRAM as in a model's step.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"
#include "util/huge_page_allocator.h"

namespace omnibus {
namespace {

ThreadPool& ffn_pool(int64_t n_threads) {
  static ThreadPool one(1), two(2);
  return n_threads == 1 ? one : two;
}

struct FfnCopy {
  PackedWeight gate, up, down;
};

// The packed copies of the last shape asked for.
struct FfnCopies {
  static constexpr size_t kMinBytes = size_t(256) << 20;
  int64_t n_embd = 0, n_ff = 0;
  std::vector<FfnCopy> copies;

  static const FfnCopies& get(int64_t n_embd, int64_t n_ff) {
    static std::unique_ptr<FfnCopies> c;
    if (!c || c->n_embd != n_embd || c->n_ff != n_ff) {
      c.reset();  // free the previous one first
      c = std::make_unique<FfnCopies>();
      c->n_embd = n_embd;
      c->n_ff = n_ff;
      std::mt19937 rng(9);
      const std::vector<uint8_t> g = quant_testing::random_rows(DType::Q4_K, n_ff, n_embd, rng);
      const std::vector<uint8_t> u = quant_testing::random_rows(DType::Q4_K, n_ff, n_embd, rng);
      const std::vector<uint8_t> d = quant_testing::random_rows(DType::Q6_K, n_embd, n_ff, rng);
      const size_t bytes = g.size() + u.size() + d.size();
      for (size_t i = 0; i < (kMinBytes + bytes - 1) / bytes; ++i) {
        ThreadPool* pool = &ffn_pool(2);
        c->copies.push_back({pack_weight(WeightView{DType::Q4_K, g.data(), n_embd, n_ff}, pool),
                             pack_weight(WeightView{DType::Q4_K, u.data(), n_embd, n_ff}, pool),
                             pack_weight(WeightView{DType::Q6_K, d.data(), n_ff, n_embd}, pool)});
      }
    }
    return *c;
  }
};

void run_ffn(benchmark::State& state, int64_t n_embd, int64_t n_ff) {
  const int64_t n_tok = state.range(0);
  const bool fused = state.range(2) != 0;
  const FfnCopies& c = FfnCopies::get(n_embd, n_ff);
  std::mt19937 rng(10);
  const std::vector<float> x = quant_testing::random_floats(size_t(n_tok * n_embd), rng);
  // the engine's activation buffers' allocator (huge pages, 64-byte aligned)
  std::vector<float, HugePageAllocator<float>> gate(size_t(n_tok * n_ff)), up(gate.size()),
      y(size_t(n_tok * n_embd));
  MatmulScratch scratch;
  ThreadPool& pool = ffn_pool(state.range(1));
  size_t next = 0;
  for (auto _ : state) {
    const FfnCopy& f = c.copies[next];
    if (fused) {
      matmul_gated_ffn(f.gate, f.up, f.down, GatedAct::kSwiglu, x.data(), n_tok, gate.data(),
                       up.data(), y.data(), pool, scratch);
    } else {
      const PackedWeight* w[2] = {&f.gate, &f.up};
      float* ys[2] = {gate.data(), up.data()};
      matmul_shared_input(w, x.data(), n_tok, ys, pool, scratch);
      matmul_gated(f.down, GatedAct::kSwiglu, gate.data(), up.data(), n_tok, y.data(), pool,
                   scratch);
    }
    next = (next + 1) % c.copies.size();
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(double(n_tok) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_GatedFfn_1B(benchmark::State& s) { run_ffn(s, 2048, 8192); }
void BM_GatedFfn_8B(benchmark::State& s) { run_ffn(s, 4096, 14336); }
BENCHMARK(BM_GatedFfn_1B)
    ->ArgsProduct({{16, 64, 512}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GatedFfn_8B)
    ->ArgsProduct({{16, 64, 512}, {1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace omnibus
