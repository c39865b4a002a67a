// Paged attention at SmolLM2-135M shapes (9 heads, 3 KV heads, head_dim 64,
// block_size 16): a decode step of 64 sequences x 512 (and x 192, the
// 128-in/128-out workload's mean) cached positions, and a 512-token prompt chunk; and
// at Llama 3.2 1B's (32 heads, 8 KV heads: a KV head's 4 queries per token), the
// 64 x 192 step (one layer's cache, and 16 layers' in turn, from DRAM), the 512-token prompt and a
// 512-token chunk after 4096 cached positions (a long prompt's later chunks). Args: {threads, KV
// format (0 f32, 1 f16, 2 q8, 3 q4, 4 kivi2)}.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "kernels/thread_pool.h"
#include "kv/attention.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_kivi.h"

namespace omnibus {
namespace {

constexpr int kHeadDim = 64, kBlock = 16;

struct Heads {
  int q, kv;
};
constexpr Heads kSmolLM2{9, 3}, kLlama1B{32, 8};

struct Setup {
  std::vector<uint8_t> k, v;
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;
  std::vector<float> q, out;
  KiviStaging staging;
  std::unique_ptr<KiviResidual> kivi;
  PagedKvLayer kv;
  AttentionParams p;

  // n_seqs sequences, each with n_past cached positions and n_tok new tokens.
  Setup(Heads h, int n_seqs, int n_past, int n_tok, KvFormat format)
      : p{h.q, h.kv, kHeadDim, 0.125f} {
    const int kHeads = h.q, kKvHeads = h.kv;
    const int per_seq = (n_past + n_tok + kBlock - 1) / kBlock;
    const size_t units = static_cast<size_t>(n_seqs) * per_seq * kKvHeads;
    const KvUnitBytes ub = kv_unit_bytes(format, kBlock, kHeadDim);
    k.assign(units * ub.k, 0);
    v.assign(units * ub.v, 0);
    if (kv_has_residual(format)) {  // q4, kivi2: open groups live in the fp16 residual
      kivi = std::make_unique<KiviResidual>(int64_t(n_seqs) * per_seq, kKvHeads, kBlock, kHeadDim,
                                            n_seqs, &staging);
    }
    kv = PagedKvLayer{format, k.data(), v.data(), kBlock, kKvHeads, kHeadDim, kivi.get()};
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    std::vector<int32_t> order(static_cast<size_t>(n_seqs) * per_seq);
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    const int ctx = n_past + n_tok;
    std::vector<float> kf(static_cast<size_t>(ctx) * kKvHeads * kHeadDim), vf(kf.size());
    for (int s = 0; s < n_seqs; ++s) {
      tables.emplace_back(order.begin() + s * per_seq, order.begin() + (s + 1) * per_seq);
      for (auto& x : kf) x = d(rng);
      for (auto& x : vf) x = d(rng);
      AttentionSeq past{0, n_past, 0, tables.back().data(), 0};
      if (n_past > 0) kv_store(kv, &past, 1, kf.data(), vf.data());
    }
    for (int s = 0; s < n_seqs; ++s)
      seqs.push_back(AttentionSeq{s * n_tok, n_tok, n_past, tables[s].data(), 0});
    // The step's own rows, stored as the engine would just before attention.
    std::vector<float> ks(static_cast<size_t>(n_seqs) * n_tok * kKvHeads * kHeadDim), vs(ks.size());
    for (auto& x : ks) x = d(rng);
    for (auto& x : vs) x = d(rng);
    kv_store(kv, seqs.data(), n_seqs, ks.data(), vs.data());
    q.resize(static_cast<size_t>(n_seqs) * n_tok * kHeads * kHeadDim);
    for (auto& x : q) x = d(rng);
    out.resize(q.size());
  }
};

// n_layers > 1: that many layers' caches, one after the other an iteration
// each, as an engine step runs its layers: together far beyond the caches
// (16 Llama 1B layers of 64 x 192 f16 positions: 400 MiB), so each call reads
// its K/V rows from DRAM, where one layer's (25 MiB) may stay in L3.
void run(benchmark::State& state, int n_seqs, int n_past, int n_tok, Heads h = kSmolLM2,
         int n_layers = 1) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const KvFormat formats[] = {KvFormat::kF32, KvFormat::kF16, KvFormat::kQ8, KvFormat::kQ4,
                              KvFormat::kKivi2};
  std::vector<std::unique_ptr<Setup>> layers;
  for (int l = 0; l < n_layers; ++l)
    layers.push_back(std::make_unique<Setup>(h, n_seqs, n_past, n_tok, formats[state.range(1)]));
  size_t il = 0;
  for (auto _ : state) {
    Setup& s = *layers[il];
    il = (il + 1) % layers.size();
    paged_attention(s.q.data(), s.kv, s.seqs.data(), n_seqs, s.p, s.out.data(), pool);
    benchmark::DoNotOptimize(s.out.data());
  }
  // q.K and p.V multiply-adds, 2 flops each
  double pairs = 0;
  for (int t = 0; t < n_tok; ++t) pairs += n_past + t + 1;
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * n_seqs * pairs * h.q * kHeadDim,
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void BM_AttentionDecode64x512(benchmark::State& state) { run(state, 64, 511, 1); }
void BM_AttentionDecode64x192(benchmark::State& state) { run(state, 64, 191, 1); }
void BM_AttentionPrefill512(benchmark::State& state) { run(state, 1, 0, 512); }
void BM_AttentionDecode1x2048(benchmark::State& state) { run(state, 1, 2047, 1); }
void BM_AttentionLlama1BDecode64x192(benchmark::State& state) { run(state, 64, 191, 1, kLlama1B); }
void BM_AttentionLlama1BDecode64x192Layers16(benchmark::State& state) {
  run(state, 64, 191, 1, kLlama1B, 16);
}
void BM_AttentionLlama1BPrefill512(benchmark::State& state) { run(state, 1, 0, 512, kLlama1B); }
void BM_AttentionLlama1BPrefill512AtDepth4096(benchmark::State& state) {
  run(state, 1, 4096, 512, kLlama1B);
}

BENCHMARK(BM_AttentionDecode64x512)
    ->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1, 2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionDecode64x192)
    ->ArgsProduct({{1, 2}, {0, 1, 2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionPrefill512)
    ->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionDecode1x2048)
    ->ArgsProduct({{1, 2, 4, 8, 16}, {0, 1, 2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionLlama1BDecode64x192)
    ->ArgsProduct({{1, 2}, {0, 1, 2, 3, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionLlama1BDecode64x192Layers16)
    ->ArgsProduct({{1, 2}, {0, 1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionLlama1BPrefill512)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionLlama1BPrefill512AtDepth4096)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace omnibus
