// The activation tiles of the packed matmul (matmul_act_avx2.h): every tier
// above avx2 quantizes bitwise as the avx2 tier does (the avx512 tier's own
// quantize_tile_k and gated activation, matmul_act_avx512.h), on ordinary
// rows and on the blocks where an order or a rounding would show: all zero,
// NaN, infinities, ties for the largest magnitude of either sign, values that
// round to +-127 exactly, and gated rows whose activation over- or
// underflows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/isa_test_util.h"
#include "kernels/matmul_act_avx2.h"
#include "kernels/quant_blocks.h"

namespace omnibus::matmul_act {
namespace {

using isa_testing::tiers_above_avx2;

// n_tok rows of n_in values: random, then super-block b of row t (b, t
// counted over the whole input) made special by kind (b + t) % 8.
std::vector<float> special_rows(int64_t n_tok, int64_t n_in, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(size_t(n_tok * n_in));
  for (float& v : x) v = normal(rng);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t b = 0; b < n_in / kQKK; ++b) {
      float* s = x.data() + t * n_in + b * kQKK;
      switch ((b + t) % 8) {
        case 0:
          break;  // ordinary
        case 1:
          std::fill(s, s + kQKK, 0.0f);
          break;
        case 2:  // a NaN after the largest value, in its 8-lane lane: the avx2
                 // kernel's max fold drops what came before a NaN
          s[9] = 50.0f;
          s[33] = std::nanf("");
          s[37] = std::nanf("");
          break;
        case 3:
          s[200] = -inf;
          s[201] = inf;
          break;
        case 4:
          s[3] = 9.0f;
          s[100] = -9.0f;
          break;  // a tie: the first one's sign
        case 5:
          s[5] = -9.0f;
          s[6] = 9.0f;
          s[255] = -9.0f;
          break;
        case 6:  // halves of the quant step: round to even, and +-127 exactly
          for (int k = 0; k < kQKK; ++k) s[k] = float((k % 255) - 127) + (k % 2 ? 0.5f : 0.0f);
          s[0] = -127.0f;
          break;
        case 7:
          s[kQKK - 1] = std::nanf("");
          s[0] = std::nanf("");
          break;
      }
    }
  }
  return x;
}

// Gate rows whose activation saturates (exp over- and underflow) or is NaN.
void add_gate_extremes(std::vector<float>& gate) {
  for (size_t i = 0; i < gate.size(); i += 97) gate[i] = 120.0f;
  for (size_t i = 13; i < gate.size(); i += 89) gate[i] = -120.0f;
  for (size_t i = 29; i < gate.size(); i += 1499) gate[i] = std::nanf("");
}

std::vector<ActBlockK> tile_k(const TileInput& in, int64_t n_in, int64_t n_valid) {
  std::vector<ActBlockK> act(size_t(n_in / kQKK));
  std::memset(act.data(), 0xA5, act.size() * sizeof(ActBlockK));  // overwritten whole
  quantize_tile_k(in, n_in, n_valid, act.data());
  return act;
}

std::vector<ActBlock32> tile32(const TileInput& in, int64_t n_in, int64_t n_valid, bool with_sum,
                               std::vector<int32_t>* qsum) {
  std::vector<ActBlock32> act(size_t(n_in / kQK));
  qsum->assign(act.size() * kTok, -1);
  quantize_tile(in, n_in, n_valid, with_sum, act.data(), qsum->data());
  return act;
}

// For every tier above avx2: quantize_tile_k and quantize_tile of every
// gate kind, 1..kTok tokens, give the avx2 tier's bytes.
TEST(MatmulAct, TilesAreBitwiseTheAvx2Tiers) {
  std::vector<Isa> tiers;
  if (const std::string why = tiers_above_avx2(&tiers); !why.empty()) GTEST_SKIP() << why;
  const Isa start = isa();
  std::mt19937 rng(41);
  const int64_t n_in = kQKK * 9;
  for (Gate gate : {Gate::kNone, Gate::kSwiglu, Gate::kGeglu}) {
    for (int64_t n_valid = 1; n_valid <= kTok; ++n_valid) {
      SCOPED_TRACE(::testing::Message() << "gate " << int(gate) << " n_valid " << n_valid);
      std::vector<float> x = special_rows(kTok, n_in, rng);
      std::vector<float> up = special_rows(kTok, n_in, rng);
      if (gate != Gate::kNone) add_gate_extremes(x);
      const TileInput in{x.data(), gate == Gate::kNone ? nullptr : up.data(), gate};
      set_isa_for_testing(Isa::kAvx2);
      const std::vector<ActBlockK> want_k = tile_k(in, n_in, n_valid);
      std::vector<int32_t> want_qsum;
      const std::vector<ActBlock32> want32 = tile32(in, n_in, n_valid, true, &want_qsum);
      for (Isa tier : tiers) {
        SCOPED_TRACE(isa_name(tier));
        set_isa_for_testing(tier);
        const std::vector<ActBlockK> got_k = tile_k(in, n_in, n_valid);
        ASSERT_EQ(std::memcmp(got_k.data(), want_k.data(), got_k.size() * sizeof(ActBlockK)), 0);
        std::vector<int32_t> got_qsum;
        const std::vector<ActBlock32> got32 = tile32(in, n_in, n_valid, true, &got_qsum);
        ASSERT_EQ(std::memcmp(got32.data(), want32.data(), got32.size() * sizeof(ActBlock32)), 0);
        ASSERT_EQ(got_qsum, want_qsum);
      }
    }
  }
  set_isa_for_testing(start);
}

// The chosen tier's Q8_K quants of a special block are those of the
// reference quantizer's rules, checked directly (not only against avx2): a
// zero block stays zero, a tie takes the first element's sign, the largest
// magnitude quantizes to -127 d-sign.
TEST(MatmulAct, SpecialBlocksFollowTheQ8KRules) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "the activation tiles need avx2";
  std::mt19937 rng(43);
  const std::vector<float> x = special_rows(kTok, kQKK * 8, rng);
  const std::vector<ActBlockK> act = tile_k(TileInput{x.data()}, kQKK * 8, kTok);
  // row 0: block 1 all zero (kind 1), block 4 a +9 / -9 tie (kind 4)
  const ActBlockK& zero = act[1];
  EXPECT_EQ(zero.d[0], 0.0f);
  for (int k = 0; k < kQKK; ++k) ASSERT_EQ(zero.qs[0][k], 0);
  const ActBlockK& tie = act[4];
  EXPECT_EQ(tie.qs[0][3], -127);  // the first of the tie: 9 / d, d = 9 / -127
  EXPECT_EQ(tie.qs[0][100], 127);
  EXPECT_LT(tie.d[0], 0.0f);
  int sum = 0;
  for (int k = 0; k < 16; ++k) sum += tie.qs[0][k];
  EXPECT_EQ(tie.bsums[0][0], sum);
  EXPECT_EQ(tie.bsum_pairs[0][0], tie.bsums[0][0] + tie.bsums[0][1]);
}

}  // namespace
}  // namespace omnibus::matmul_act
