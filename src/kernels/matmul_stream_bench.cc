// Micro-benchmarks of matmul at the shapes of the models people serve, whose
// weights stream from DRAM at every step (unlike the in-cache shapes of
// matmul_bench.cc): Llama 3.1 8B's gate/up (4096 -> 14336), down (14336 ->
// 4096) and output head (4096 -> 128256), packed as the model loader packs
// them, at 1..512 tokens and 1 and 2 threads.
//
//   kernels_microbench --benchmark_filter='Stream|ReadBandwidth'
//   OMNIBUS_ISA=avx2 kernels_microbench --benchmark_filter='Stream_Q4_K.*/1/'
//
// Arguments: n_tok/threads (wall time). Counters:
//   bytes_per_second  the matrix's bytes in the GGUF file per second: at one
//                     token, compare with BM_ReadBandwidth of the same thread
//                     count (the fraction docs/performance.md reports)
//   packed_bytes/s    the bytes actually streamed (the packed layout, which is
//                     larger than the file's for some types)
//   GMAC/s            multiply-adds per second (at 64+ tokens: against the
//                     int8 peak)
// The weights are random quants (speed does not depend on their values). A
// shape is packed into enough copies to fill 256 MiB, used in turn, so that
// no iteration finds its matrix in the L3 cache (32 MiB on an EPYC Zen 5: a
// 48 MB matrix read twice in a row is partly served from there); the copies
// are made once and freed when the next shape starts.
//
// GatedFfn: a gated feed-forward block's three matmuls (matmul_gated_ffn) at
// the shapes of Llama 3.2 1B (2048 -> 8192 -> 2048) and Llama 3.1 8B (4096
// -> 14336 -> 4096), Q4_K gate / up and Q6_K down as in their Q4_K_M files,
// against the same block unfused (both products written out, the activation
// made as the down projection quantizes them), the blocks likewise in copies
// filling 256 MiB. Arguments n_tok / threads / fused (1: matmul_gated_ffn,
// which on the amx tier runs gated quads from 96 tokens a call; 0:
// matmul_shared_input then matmul_gated); the same bits either way
// (kernels/matmul_gated_ffn_test.cc). Counter tok/s.
//   kernels_microbench --benchmark_filter='GatedFfn'
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"
#include "util/huge_page_allocator.h"

namespace omnibus {
namespace {

ThreadPool& stream_pool(int64_t n_threads) {
  static ThreadPool one(1), two(2);
  return n_threads == 1 ? one : two;
}

// The packed copies of the last shape asked for (one shape at a time: the
// head alone is up to 1 GiB).
struct StreamMatrix {
  static constexpr size_t kMinBytes = size_t(256) << 20;
  DType type{};
  int64_t n_in = 0, n_out = 0;
  size_t file_bytes = 0;
  std::vector<std::vector<uint8_t>> raw;
  std::vector<PackedWeight> packed;

  static const StreamMatrix& get(DType type, int64_t n_in, int64_t n_out) {
    static std::unique_ptr<StreamMatrix> m;
    if (!m || m->type != type || m->n_in != n_in || m->n_out != n_out) {
      m.reset();  // free the previous one first
      m = std::make_unique<StreamMatrix>();
      m->type = type;
      m->n_in = n_in;
      m->n_out = n_out;
      std::mt19937 rng(7);
      std::vector<uint8_t> raw = quant_testing::random_rows(type, n_out, n_in, rng);
      m->file_bytes = raw.size();
      const size_t n_copies = (kMinBytes + raw.size() - 1) / raw.size();
      for (size_t c = 0; c < n_copies; ++c) {
        m->raw.push_back(raw);  // the fallback of a type without a packed layout reads it
        m->packed.push_back(
            pack_weight(WeightView{type, m->raw.back().data(), n_in, n_out}, &stream_pool(2)));
        if (m->packed.back().is_packed()) std::vector<uint8_t>().swap(m->raw.back());
      }
    }
    return *m;
  }
};

void run_stream(benchmark::State& state, DType type, int64_t n_in, int64_t n_out) {
  const int64_t n_tok = state.range(0);
  const StreamMatrix& m = StreamMatrix::get(type, n_in, n_out);
  std::mt19937 rng(8);
  std::vector<float> x = quant_testing::random_floats(size_t(n_tok * n_in), rng);
  // the engine's activation buffers' allocator (huge pages: a call writes a
  // column strip, one row per token)
  std::vector<float, HugePageAllocator<float>> y(size_t(n_tok * n_out));
  MatmulScratch scratch;
  ThreadPool& pool = stream_pool(state.range(1));
  size_t next = 0;
  for (auto _ : state) {
    matmul(m.packed[next], x.data(), n_tok, y.data(), pool, scratch);
    next = (next + 1) % m.packed.size();
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = double(state.iterations());
  const double streamed =
      m.packed[0].is_packed() ? double(m.packed[0].size_bytes()) : double(m.file_bytes);
  state.SetBytesProcessed(int64_t(double(m.file_bytes) * iters));
  state.counters["packed_bytes/s"] = benchmark::Counter(
      streamed * iters, benchmark::Counter::kIsRate, benchmark::Counter::OneK::kIs1024);
  state.counters["GMAC/s"] = benchmark::Counter(
      double(n_in) * double(n_out) * double(n_tok) * iters / 1e9, benchmark::Counter::kIsRate);
}

#define OMNIBUS_STREAM(type, n_in, n_out, tokens)                 \
  void BM_Stream_##type##_##n_in##x##n_out(benchmark::State& s) { \
    run_stream(s, DType::type, n_in, n_out);                      \
  }                                                               \
  BENCHMARK(BM_Stream_##type##_##n_in##x##n_out)                  \
      ->ArgsProduct({tokens, {1, 2}})                             \
      ->UseRealTime()                                             \
      ->Unit(benchmark::kMillisecond)

#define OMNIBUS_STREAM_TOKENS \
  { 1, 2, 4, 5, 8, 9, 12, 16, 32, 64, 512 }
#define OMNIBUS_HEAD_TOKENS \
  { 1, 4, 5, 16, 64 }
// Each format at the three 8B shapes (n_in x n_out as the loader sees them).
#define OMNIBUS_STREAM_TYPE(type)                           \
  OMNIBUS_STREAM(type, 4096, 14336, OMNIBUS_STREAM_TOKENS); \
  OMNIBUS_STREAM(type, 14336, 4096, OMNIBUS_STREAM_TOKENS); \
  OMNIBUS_STREAM(type, 4096, 128256, OMNIBUS_HEAD_TOKENS)

OMNIBUS_STREAM_TYPE(Q4_K);
OMNIBUS_STREAM_TYPE(Q6_K);
OMNIBUS_STREAM_TYPE(Q8_0);
OMNIBUS_STREAM_TYPE(Q4_0);
OMNIBUS_STREAM_TYPE(Q5_K);
OMNIBUS_STREAM_TYPE(Q4_1);
OMNIBUS_STREAM_TYPE(Q5_0);
OMNIBUS_STREAM_TYPE(F16);
OMNIBUS_STREAM_TYPE(BF16);
// The 8B's other one-token jobs: its attention matrices (4096 -> 1024: k, v;
// 4096: q and the output; 6144: q, k, v as one job where they share a type),
// whose calls are short enough for their start and end to show against the
// stream, and gate and up as one job (28672).
OMNIBUS_STREAM(Q4_K, 4096, 1024, {1});
OMNIBUS_STREAM(Q6_K, 4096, 1024, {1});
OMNIBUS_STREAM(Q4_K, 4096, 4096, {1});
OMNIBUS_STREAM(Q4_K, 4096, 6144, {1});
OMNIBUS_STREAM(Q4_K, 4096, 28672, {1});
// Llama 3.2 1B's tied Q6_K head (2048 -> 128256), the largest matrix of its decode step.
OMNIBUS_STREAM(Q6_K, 2048, 128256, OMNIBUS_HEAD_TOKENS);
// SmolLM2-135M's rows (n_in 576, short: the prefetch policy differs, see
// kFarMinIn in matmul_packed_internal.h): its Q8_0 tied head and Q4_1 FFN.
OMNIBUS_STREAM(Q8_0, 576, 49152, {1});
OMNIBUS_STREAM(Q4_1, 576, 1536, {1});
OMNIBUS_STREAM(Q4_1, 1536, 576, {1});

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
        ThreadPool* pool = &stream_pool(2);
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
  ThreadPool& pool = stream_pool(state.range(1));
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
