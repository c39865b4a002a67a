// matmul_gated_ffn (kernels/matmul.h): a gated feed-forward block's three
// matmuls, bitwise what matmul_shared_input then matmul_gated give on the
// avx2 tier, on every tier this CPU runs; and the amx tier's gated quads
// (matmul_multi with out_act) bitwise ops.h's swiglu / geglu of the two
// products they replace.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/isa_test_util.h"
#include "kernels/matmul.h"
#include "kernels/matmul_packed_avx2.h"
#include "kernels/ops_parallel.h"
#include "kernels/quant_test_util.h"
#include "kernels/thread_pool.h"
#include "util/huge_page_allocator.h"

namespace omnibus {
namespace {

using quant_testing::random_floats;
using quant_testing::random_rows;
// 64-byte aligned rows, as the engine's buffers (the tile unit streams whole
// 64-byte strips to them)
using Rows = std::vector<float, HugePageAllocator<float>>;

struct Ffn {
  std::vector<uint8_t> gate_rows, up_rows, down_rows;
  PackedWeight gate, up, down;
};

Ffn make_ffn(DType type, int64_t n_embd, int64_t n_ff, DType down_type, int64_t n_down_out,
             std::mt19937& rng) {
  Ffn f;
  f.gate_rows = random_rows(type, n_ff, n_embd, rng);
  f.up_rows = random_rows(type, n_ff, n_embd, rng);
  f.down_rows = random_rows(down_type, n_down_out, n_ff, rng);
  f.gate = pack_weight(WeightView{type, f.gate_rows.data(), n_embd, n_ff});
  f.up = pack_weight(WeightView{type, f.up_rows.data(), n_embd, n_ff});
  f.down = pack_weight(WeightView{down_type, f.down_rows.data(), n_ff, n_down_out});
  return f;
}

// The unfused block: both products written out, the activation made as the
// down projection quantizes them.
std::vector<float> unfused(const Ffn& f, GatedAct act, const std::vector<float>& x, int64_t n_tok,
                           ThreadPool& pool, MatmulScratch& scratch) {
  const int64_t n_ff = f.gate.view().n_out;
  std::vector<float> gate(size_t(n_tok * n_ff)), up(gate.size());
  std::vector<float> y(size_t(n_tok * f.down.view().n_out), NAN);
  const PackedWeight* w[2] = {&f.gate, &f.up};
  float* ys[2] = {gate.data(), up.data()};
  matmul_shared_input(w, x.data(), n_tok, ys, pool, scratch);
  matmul_gated(f.down, act, gate.data(), up.data(), n_tok, y.data(), pool, scratch);
  return y;
}

// Every tier this CPU runs gives the avx2 tier's unfused block, bit for bit:
// 256 hidden rows (16 gated quads where the tile unit runs the call), 64
// (Q4_0 / Q8_0: no gated kernel) and 40 (no whole pairs of groups; an F16
// down projection, which takes any row length); 5 tokens (the avx512
// kernels), 70 (one tile-unit call of pairs, a last unit of 6 tokens: too
// few for quads, unfused), 100 (one call, a last unit of 4), 515 (calls of
// 512 and 3: unfused) and 608 (512 and 96).
TEST(MatmulGatedFfn, EveryTierGivesTheUnfusedBlock) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "the scalar tier packs no weights";
  std::vector<Isa> tiers{Isa::kAvx2};
  isa_testing::tiers_above_avx2(&tiers);
  std::mt19937 rng(41);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const Isa start = isa();
  const int64_t n_embd = 256 * 3, n_down_out = 21;
  struct Case {
    DType type;
    int64_t n_ff;
    DType down_type;
  };
  for (const Case& c : {Case{DType::Q4_K, 256, DType::Q6_K}, Case{DType::Q5_K, 256, DType::Q5_K},
                        Case{DType::Q6_K, 256, DType::Q4_K}, Case{DType::Q4_K, 40, DType::F16},
                        Case{DType::Q4_0, 64, DType::Q4_0}, Case{DType::Q8_0, 64, DType::Q8_0}}) {
    set_isa_for_testing(Isa::kAvx2);
    const Ffn f = make_ffn(c.type, n_embd, c.n_ff, c.down_type, n_down_out, rng);
    for (int64_t n_tok : {5, 70, 100, 515, 608}) {
      for (GatedAct act : {GatedAct::kSwiglu, GatedAct::kGeglu}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(c.type) << " n_ff=" << c.n_ff << " n_tok="
                                          << n_tok << " geglu=" << (act == GatedAct::kGeglu));
        const std::vector<float> x = random_floats(size_t(n_tok * n_embd), rng);
        set_isa_for_testing(Isa::kAvx2);
        const std::vector<float> want = unfused(f, act, x, n_tok, pool, scratch);
        for (Isa tier : tiers) {
          SCOPED_TRACE(isa_name(tier));
          set_isa_for_testing(tier);
          Rows gate(size_t(n_tok * c.n_ff), NAN), up(gate.size(), NAN);
          std::vector<float> got(want.size(), -1.0f);
          matmul_gated_ffn(f.gate, f.up, f.down, act, x.data(), n_tok, gate.data(), up.data(),
                           got.data(), pool, scratch);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
        }
      }
    }
  }
  set_isa_for_testing(start);
}

// Where the fused path runs: the amx tier's K-quants (whole pairs of groups,
// both matrices packed, at least the 96 tokens of a quad in every call),
// nowhere else.
TEST(MatmulGatedFfn, GatedQuadsRunOnTheTileUnitsCalls) {
  if (!cpu_features().supports(Isa::kAmx)) {
    GTEST_SKIP() << "this CPU has no amx tier (best: " << isa_name(cpu_features().best) << ")";
  }
  std::mt19937 rng(43);
  const Isa start = isa();
  set_isa_for_testing(Isa::kAmx);
  const Ffn k = make_ffn(DType::Q4_K, 512, 256, DType::Q4_K, 8, rng);
  const Ffn odd = make_ffn(DType::Q4_K, 512, 40, DType::F16, 8, rng);
  const Ffn q8 = make_ffn(DType::Q8_0, 512, 64, DType::Q8_0, 8, rng);
  auto runs = [](const Ffn& f, const uint8_t* up_data, int64_t n_tok) {
    return matmul_packed::gated_out_runs(f.gate.view(), f.up.view(), f.gate.data(), up_data, n_tok);
  };
  for (int64_t n_tok : {96, 100, 512, 608, 1024, 1120}) {
    EXPECT_TRUE(runs(k, k.up.data(), n_tok)) << n_tok;
  }
  for (int64_t n_tok : {1, 8, 13, 64, 95, 515, 600})
    EXPECT_FALSE(runs(k, k.up.data(), n_tok)) << n_tok;
  EXPECT_FALSE(runs(odd, odd.up.data(), 64));
  EXPECT_FALSE(runs(q8, q8.up.data(), 64));
  EXPECT_FALSE(runs(k, nullptr, 64));  // W_up not packed at load
  set_isa_for_testing(Isa::kAvx512);
  EXPECT_FALSE(runs(k, k.up.data(), 64));
  set_isa_for_testing(start);
}

// The gated quads' hidden rows themselves: bitwise ops.h's swiglu / geglu of
// the products matmul_shared_input writes, and nothing written to W_up's
// output; 100 tokens and 1120 (calls of 512, 512, 96), streamed to 64-byte
// aligned rows and stored with masks to rows that are not.
TEST(MatmulGatedFfn, GatedQuadsWriteTheActivation) {
  if (!cpu_features().supports(Isa::kAmx)) {
    GTEST_SKIP() << "this CPU has no amx tier (best: " << isa_name(cpu_features().best) << ")";
  }
  std::mt19937 rng(47);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const Isa start = isa();
  set_isa_for_testing(Isa::kAmx);
  const int64_t n_embd = 256 * 5, n_ff = 80;
  for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const Ffn f = make_ffn(type, n_embd, n_ff, DType::F16, 8, rng);
    for (int64_t n_tok : {100, 1120}) {
      for (GatedAct act : {GatedAct::kSwiglu, GatedAct::kGeglu}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(type) << " n_tok=" << n_tok
                                          << " geglu=" << (act == GatedAct::kGeglu));
        ASSERT_TRUE(matmul_packed::gated_out_runs(f.gate.view(), f.up.view(), f.gate.data(),
                                                  f.up.data(), n_tok));
        const std::vector<float> x = random_floats(size_t(n_tok * n_embd), rng);
        std::vector<float> want(size_t(n_tok * n_ff)), up(want.size());
        const PackedWeight* w[2] = {&f.gate, &f.up};
        float* ys[2] = {want.data(), up.data()};
        matmul_shared_input(w, x.data(), n_tok, ys, pool, scratch);
        if (act == GatedAct::kSwiglu) {
          swiglu(want.data(), up.data(), want.data(), n_tok, n_ff, pool);
        } else {
          geglu(want.data(), up.data(), want.data(), n_tok, n_ff, pool);
        }
        const WeightView* views[2] = {&f.gate.view(), &f.up.view()};
        const uint8_t* data[2] = {f.gate.data(), f.up.data()};
        for (size_t misalign : {0, 4}) {  // floats past a 64-byte boundary
          SCOPED_TRACE(::testing::Message() << "misalign=" << misalign);
          Rows got(misalign + want.size(), NAN), untouched(want.size(), -2.0f);
          float* outs[2] = {got.data() + misalign, untouched.data()};
          matmul_packed::matmul_multi(
              views, data, outs, 2, matmul_act::TileInput{x.data()}, n_tok, pool, scratch,
              act == GatedAct::kSwiglu ? matmul_act::Gate::kSwiglu : matmul_act::Gate::kGeglu);
          ASSERT_EQ(std::memcmp(want.data(), outs[0], want.size() * 4), 0);
          for (float v : untouched) ASSERT_EQ(v, -2.0f);
        }
      }
    }
  }
  set_isa_for_testing(start);
}

}  // namespace
}  // namespace omnibus
