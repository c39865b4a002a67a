#include "kv/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_kivi.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

using enum KvFormat;  // kF32, kF16, kQ8, kQ4, kKivi2 in the shape lists

struct Shape {
  int n_head, n_kv_head, head_dim, block_size;
  KvFormat format;
  int kivi_window = -1;  // q4/kivi2 fp16 window blocks; -1: the format's default
};

// A KV pool filled with NaN, so a kernel that reads a slot it should not
// (unwritten, masked, outside the window) poisons its output. Quantized
// formats are filled with 0xff bytes: their fp16 scales read as NaN.
class KvPool {
 public:
  KvPool(const Shape& sh, int n_blocks, int kivi_slots = 64) : sh_(sh), n_blocks_(n_blocks) {
    const size_t n = static_cast<size_t>(n_blocks) * sh.n_kv_head * sh.block_size * sh.head_dim;
    const KvUnitBytes ub = kv_unit_bytes(sh.format, sh.block_size, sh.head_dim);
    k_.resize(static_cast<size_t>(n_blocks) * sh.n_kv_head * ub.k);
    v_.resize(static_cast<size_t>(n_blocks) * sh.n_kv_head * ub.v);
    if (sh.format == KvFormat::kF32) {
      std::fill_n(reinterpret_cast<float*>(k_.data()), n, NAN);
      std::fill_n(reinterpret_cast<float*>(v_.data()), n, NAN);
    } else if (sh.format == KvFormat::kF16) {
      std::fill_n(reinterpret_cast<uint16_t*>(k_.data()), n, uint16_t{0x7e00});
      std::fill_n(reinterpret_cast<uint16_t*>(v_.data()), n, uint16_t{0x7e00});
    } else {
      std::fill(k_.begin(), k_.end(), uint8_t{0xff});
      std::fill(v_.begin(), v_.end(), uint8_t{0xff});
    }
    if (kv_has_residual(sh.format)) {
      kivi_ = std::make_unique<KiviResidual>(
          n_blocks, sh.n_kv_head, sh.block_size, sh.head_dim, kivi_slots, &staging_,
          sh.kivi_window >= 0 ? sh.kivi_window : kv_default_residual_blocks(sh.format));
    }
    blocks_.resize(n_blocks);
    std::iota(blocks_.begin(), blocks_.end(), 0);
    std::shuffle(blocks_.begin(), blocks_.end(), std::mt19937(42));
  }
  PagedKvLayer layer() {
    return PagedKvLayer{sh_.format,    k_.data(),    v_.data(),  sh_.block_size,
                        sh_.n_kv_head, sh_.head_dim, kivi_.get()};
  }
  KiviResidual* kivi() { return kivi_.get(); }
  // A block table for a sequence of up to n_ctx positions, from scattered blocks.
  std::vector<int32_t> alloc(int n_ctx) {
    const int n = (n_ctx + sh_.block_size - 1) / sh_.block_size;
    EXPECT_LE(next_ + n, n_blocks_);
    std::vector<int32_t> t(blocks_.begin() + next_, blocks_.begin() + next_ + n);
    next_ += n;
    return t;
  }

 private:
  Shape sh_;
  int n_blocks_;
  std::vector<uint8_t> k_, v_;
  KiviStaging staging_;
  std::unique_ptr<KiviResidual> kivi_;
  std::vector<int32_t> blocks_;
  int next_ = 0;
};

// One sequence's data for every position: q [n_ctx, n_head, hd], k/v [n_ctx, n_kv, hd].
struct SeqData {
  std::vector<float> q, k, v;
  std::vector<int32_t> table;
  int window = 0;
};

SeqData make_seq(const Shape& sh, KvPool& pool, int n_ctx, int window, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  SeqData s;
  s.q.resize(static_cast<size_t>(n_ctx) * sh.n_head * sh.head_dim);
  s.k.resize(static_cast<size_t>(n_ctx) * sh.n_kv_head * sh.head_dim);
  s.v.resize(s.k.size());
  for (auto& x : s.q) x = d(rng) * 2.f;  // sharp enough attention patterns
  for (auto& x : s.k) x = d(rng);
  for (auto& x : s.v) x = d(rng);
  s.table = pool.alloc(n_ctx);
  s.window = window;
  return s;
}

struct Part {  // one sequence's share of a step
  SeqData* seq;
  int n_past, n_tokens;
  bool bidirectional = false;
};

// Runs one step: kv_store of the new tokens, then paged_attention (and the
// reference if ref_out is given). Returns out [n_tok_total, n_head, hd].
std::vector<float> run_step(const Shape& sh, KvPool& pool, const std::vector<Part>& parts,
                            ThreadPool& tp, float softcap = 0.f,
                            std::vector<float>* ref_out = nullptr) {
  const int hd = sh.head_dim;
  std::vector<AttentionSeq> seqs;
  std::vector<float> q, k, v;
  int32_t first = 0;
  for (const Part& pt : parts) {
    seqs.push_back(
        AttentionSeq{first, pt.n_tokens, pt.n_past, pt.seq->table.data(), pt.seq->window});
    seqs.back().bidirectional = pt.bidirectional;
    first += pt.n_tokens;
    auto qb = pt.seq->q.begin() + static_cast<size_t>(pt.n_past) * sh.n_head * hd;
    q.insert(q.end(), qb, qb + static_cast<size_t>(pt.n_tokens) * sh.n_head * hd);
    auto kb = pt.seq->k.begin() + static_cast<size_t>(pt.n_past) * sh.n_kv_head * hd;
    k.insert(k.end(), kb, kb + static_cast<size_t>(pt.n_tokens) * sh.n_kv_head * hd);
    auto vb = pt.seq->v.begin() + static_cast<size_t>(pt.n_past) * sh.n_kv_head * hd;
    v.insert(v.end(), vb, vb + static_cast<size_t>(pt.n_tokens) * sh.n_kv_head * hd);
  }
  const PagedKvLayer kv = pool.layer();
  kv_store(kv, seqs.data(), static_cast<int>(seqs.size()), k.data(), v.data());
  AttentionParams p{sh.n_head, sh.n_kv_head, hd, 1.f / std::sqrt(static_cast<float>(hd)), softcap};
  std::vector<float> out(q.size(), -777.f);
  paged_attention(q.data(), kv, seqs.data(), static_cast<int>(seqs.size()), p, out.data(), tp);
  if (ref_out) {
    ref_out->assign(q.size(), -777.f);
    paged_attention_ref(q.data(), kv, seqs.data(), static_cast<int>(seqs.size()), p,
                        ref_out->data());
  }
  return out;
}

// Stores a sequence's history [0, n) in one earlier step.
void prefill_history(const Shape& sh, KvPool& pool, SeqData& s, int n) {
  if (n == 0) return;
  std::vector<AttentionSeq> seqs{AttentionSeq{0, n, 0, s.table.data(), s.window}};
  kv_store(pool.layer(), seqs.data(), 1, s.k.data(), s.v.data());
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " i=" << i;
    ASSERT_LE(std::fabs(got[i] - want[i]), tol * (1.f + std::fabs(want[i])))
        << what << " i=" << i << " got " << got[i] << " want " << want[i];
  }
}

struct Case {
  const char* name;
  std::vector<std::array<int, 3>> seqs;  // {n_past, n_tokens, window}
  bool bidirectional = false;            // an encoder's: every query sees the whole chunk
};

const Case kCases[] = {
    {"decode-only", {{0, 1, 0}, {5, 1, 0}, {40, 1, 0}, {130, 1, 0}}},
    {"prefill-first-chunk", {{0, 37, 0}}},
    {"prefill-chunk-after-past", {{50, 23, 0}}},
    {"mixed", {{0, 20, 0}, {70, 1, 0}, {33, 15, 0}, {1, 1, 0}, {100, 9, 0}}},
    {"sliding-window", {{0, 40, 8}, {60, 1, 16}, {45, 12, 5}, {10, 3, 1}}},
    {"bidirectional", {{0, 37, 0}, {0, 1, 0}, {0, 70, 0}, {0, 6, 0}}, true},
};

std::string shape_name(const Shape& sh) {
  char name[64];
  std::snprintf(name, sizeof name, "h%dkv%dd%dbs%d%s", sh.n_head, sh.n_kv_head, sh.head_dim,
                sh.block_size, std::string(kv_format_name(sh.format)).c_str());
  if (sh.kivi_window >= 0) return std::string(name) + "w" + std::to_string(sh.kivi_window);
  return std::string(name);
}

// One step of case c from a fresh pool holding its sequences' histories (the
// same data every call); the reference's output too when ref is given.
std::vector<float> run_case(const Shape& sh, const Case& c, float softcap, ThreadPool& tp,
                            std::vector<float>* ref = nullptr) {
  KvPool pool(sh, 512);
  std::vector<SeqData> data;
  data.reserve(c.seqs.size());
  std::vector<Part> parts;
  uint32_t seed = 1;
  for (const auto& s : c.seqs) {
    data.push_back(make_seq(sh, pool, s[0] + s[1], s[2], seed++));
    prefill_history(sh, pool, data.back(), s[0]);
  }
  for (size_t i = 0; i < c.seqs.size(); ++i)
    parts.push_back(Part{&data[i], c.seqs[i][0], c.seqs[i][1], c.bidirectional});
  return run_step(sh, pool, parts, tp, softcap, ref);
}

class AttentionVsRef : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionVsRef, MatchesReference) {
  const Shape sh = GetParam();
  ThreadPool tp(3);
  for (const Case& c : kCases) {
    for (float softcap : {0.f, 5.f}) {
      std::vector<float> ref;
      const auto out = run_case(sh, c, softcap, tp, &ref);
      expect_close(out, ref, 2e-5f, c.name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionVsRef,
    ::testing::Values(
        Shape{9, 3, 64, 16, kF32}, Shape{9, 3, 64, 16, kF16}, Shape{8, 2, 64, 1, kF32},
        Shape{8, 2, 256, 32, kF32}, Shape{4, 1, 256, 16, kF16}, Shape{6, 2, 24, 16, kF32},
        Shape{4, 4, 12, 32, kF16},  // head_dim not a multiple of 8: scalar path
        Shape{3, 1, 8, 1, kF16},
        // quantized formats: AVX2 fast dequant (hd % 32 == 0), scalar rows, scalar kernel
        Shape{9, 3, 64, 16, kQ8}, Shape{9, 3, 64, 16, kQ4}, Shape{9, 3, 64, 16, kKivi2},
        Shape{4, 1, 256, 16, kQ8}, Shape{4, 1, 256, 16, kQ4}, Shape{4, 1, 256, 16, kKivi2},
        Shape{8, 2, 64, 1, kKivi2}, Shape{8, 2, 64, 32, kKivi2}, Shape{6, 2, 24, 16, kQ4},
        Shape{6, 2, 24, 16, kKivi2}, Shape{4, 4, 12, 32, kQ8}, Shape{4, 4, 12, 32, kKivi2},
        Shape{6, 2, 24, 16, kQ8},  // AVX2 q8 with one scale per row (hd % 32 != 0)
        // fp16 windows other than the defaults (kivi2 1, q4 0)
        Shape{9, 3, 64, 16, kKivi2, 0}, Shape{9, 3, 64, 16, kKivi2, 3}, Shape{9, 3, 64, 16, kQ4, 1},
        Shape{8, 2, 64, 1, kKivi2, 5}),
    [](const ::testing::TestParamInfo<Shape>& pi) { return shape_name(pi.param); });

TEST(AttentionTest, SingleKeyReturnsItsValue) {
  const Shape sh{2, 1, 16, 16, KvFormat::kF32};
  KvPool pool(sh, 4);
  SeqData s = make_seq(sh, pool, 1, 0, 3);
  ThreadPool tp(1);
  const auto out = run_step(sh, pool, {Part{&s, 0, 1}}, tp);
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 16; ++d) EXPECT_FLOAT_EQ(out[h * 16 + d], s.v[d]);
  }
}

TEST(AttentionTest, F16StoreRoundsToNearest) {
  const Shape sh{1, 1, 16, 4, KvFormat::kF16};
  KvPool pool(sh, 1);
  SeqData s = make_seq(sh, pool, 1, 0, 4);
  prefill_history(sh, pool, s, 1);
  const uint16_t* k = static_cast<const uint16_t*>(pool.layer().k);
  const int block = s.table[0];
  for (int d = 0; d < 16; ++d) EXPECT_EQ(k[block * 4 * 16 + d], fp32_to_fp16(s.k[d])) << d;
}

// Batch invariance: a sequence's output is bitwise the same alone or with
// others, whatever the thread count, and whatever the chunking of its prompt.
class AttentionInvariance : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionInvariance, SameBitsAloneOrInABatch) {
  const Shape sh = GetParam();
  const size_t row = static_cast<size_t>(sh.n_head) * sh.head_dim;
  // Each run gets a fresh pool with the same history, as a step is run once
  // per position in an engine (kivi2's residual follows the steps).
  struct World {
    KvPool pool;
    SeqData a, b, c;
    explicit World(const Shape& shp) : pool(shp, 640) {
      a = make_seq(shp, pool, 300, 0, 10);
      b = make_seq(shp, pool, 90, 0, 11);
      c = make_seq(shp, pool, 200, 24, 12);
      prefill_history(shp, pool, a, 299);
      prefill_history(shp, pool, b, 60);
      prefill_history(shp, pool, c, 150);
    }
  };
  ThreadPool one(1), many(4);
  // a: decode at 299; c: chunk [150, 200)
  World w1(sh), w2(sh), w3(sh), w4(sh);
  const auto alone_a = run_step(sh, w1.pool, {Part{&w1.a, 299, 1}}, one);
  const auto alone_c = run_step(sh, w2.pool, {Part{&w2.c, 150, 50}}, many);
  const auto batch =
      run_step(sh, w3.pool, {Part{&w3.b, 60, 30}, Part{&w3.a, 299, 1}, Part{&w3.c, 150, 50}}, many);
  const auto alone_a_many = run_step(sh, w4.pool, {Part{&w4.a, 299, 1}}, many);
  EXPECT_EQ(0, std::memcmp(alone_a.data(), batch.data() + 30 * row, row * 4));
  EXPECT_EQ(0, std::memcmp(alone_a.data(), alone_a_many.data(), row * 4));
  EXPECT_EQ(0, std::memcmp(alone_c.data(), batch.data() + 31 * row, 50 * row * 4));
}

// A decode step of many sequences (more tasks than 16 a thread): the threads
// claim runs of consecutive tasks (attention.cc), so which thread runs which
// head differs from a lone sequence's step; each output is still its bits
// alone.
TEST_P(AttentionInvariance, SameBitsInAManySequenceDecodeStep) {
  const Shape sh = GetParam();
  const size_t row = static_cast<size_t>(sh.n_head) * sh.head_dim;
  constexpr int kSeqs = 40;
  const auto ctx = [](int i) { return 5 + (7 * i) % 53; };
  const auto blocks = [&](int i) { return (ctx(i) + sh.block_size - 1) / sh.block_size; };
  int n_blocks = 0;
  for (int i = 0; i < kSeqs; ++i) n_blocks += blocks(i);
  KvPool pool(sh, n_blocks, 4 * kSeqs);
  std::vector<SeqData> seqs;
  seqs.reserve(kSeqs);  // parts point into it
  std::vector<Part> parts;
  for (int i = 0; i < kSeqs; ++i) {
    seqs.push_back(make_seq(sh, pool, ctx(i), 0, 100 + i));
    prefill_history(sh, pool, seqs.back(), ctx(i) - 1);
    parts.push_back(Part{&seqs.back(), ctx(i) - 1, 1});
  }
  ThreadPool one(1), three(3);
  const auto batch = run_step(sh, pool, parts, three);
  for (int i = 0; i < kSeqs; ++i) {
    KvPool alone_pool(sh, blocks(i));
    SeqData s = make_seq(sh, alone_pool, ctx(i), 0, 100 + i);
    prefill_history(sh, alone_pool, s, ctx(i) - 1);
    const auto alone = run_step(sh, alone_pool, {Part{&s, ctx(i) - 1, 1}}, one);
    EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + i * row, row * 4)) << "sequence " << i;
  }
}

TEST_P(AttentionInvariance, SameBitsWhateverTheChunking) {
  const Shape sh = GetParam();
  const size_t row = static_cast<size_t>(sh.n_head) * sh.head_dim;
  const int n = 120;
  ThreadPool tp(3);
  for (int window : {0, 20}) {
    KvPool pool1(sh, 128), pool2(sh, 128);
    SeqData s1 = make_seq(sh, pool1, n, window, 20);
    SeqData s2 = make_seq(sh, pool2, n, window, 20);  // same data, other blocks
    const auto whole = run_step(sh, pool1, {Part{&s1, 0, n}}, tp);
    std::vector<float> chunked;
    int done = 0;
    for (int len : {37, 1, 50, 5, 27}) {
      const auto part = run_step(sh, pool2, {Part{&s2, done, len}}, tp);
      chunked.insert(chunked.end(), part.begin(), part.end());
      done += len;
    }
    ASSERT_EQ(done, n);
    ASSERT_EQ(whole.size(), chunked.size());
    for (int t = 0; t < n; ++t) {
      ASSERT_EQ(0, std::memcmp(whole.data() + t * row, chunked.data() + t * row, row * 4))
          << "token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionInvariance,
    ::testing::Values(Shape{9, 3, 64, 16, kF32}, Shape{9, 3, 64, 16, kF16},
                      Shape{8, 2, 256, 32, kF32}, Shape{6, 2, 24, 1, kF16},
                      Shape{4, 2, 12, 16, kF32}, Shape{9, 3, 64, 16, kQ8}, Shape{9, 3, 64, 16, kQ4},
                      Shape{9, 3, 64, 16, kKivi2}, Shape{8, 2, 256, 32, kKivi2},
                      Shape{6, 2, 24, 1, kKivi2}, Shape{4, 2, 12, 16, kKivi2},
                      Shape{4, 2, 12, 16, kQ4}, Shape{6, 2, 24, 16, kQ8}, Shape{4, 1, 256, 16, kQ8},
                      Shape{9, 3, 64, 16, kKivi2, 0}, Shape{9, 3, 64, 16, kKivi2, 2},
                      Shape{9, 3, 64, 16, kQ4, 1}),
    [](const ::testing::TestParamInfo<Shape>& pi) { return shape_name(pi.param); });

// Every ISA tier above avx2 this CPU has gives avx2's output bit for bit (the
// avx512 tier's tile kernels: attention_avx512.cc), on every case, with and
// without a softcap, at one thread (each task a KV head's 4+ queries: groups
// of 4) and three.
class AttentionTiers : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionTiers, SameBitsEveryTier) {
  const CpuFeatures& f = cpu_features();
  std::vector<Isa> tiers;
  for (Isa tier : kAllIsas) {
    if (tier > Isa::kAvx2 && f.use_avx2() && f.supports(tier)) tiers.push_back(tier);
  }
  if (tiers.empty()) GTEST_SKIP() << "no tier above avx2 here (best: " << isa_name(f.best) << ")";
  const Shape sh = GetParam();
  const Isa start = isa();
  const auto run_at = [&](Isa tier, const Case& c, float softcap, ThreadPool& tp) {
    set_isa_for_testing(tier);
    return run_case(sh, c, softcap, tp);
  };
  ThreadPool one(1), three(3);
  for (ThreadPool* tp : {&one, &three}) {
    for (const Case& c : kCases) {
      for (float softcap : {0.f, 5.f}) {
        const std::vector<float> want = run_at(Isa::kAvx2, c, softcap, *tp);
        for (Isa tier : tiers) {
          const std::vector<float> got = run_at(tier, c, softcap, *tp);
          ASSERT_EQ(got.size(), want.size());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << c.name << " softcap " << softcap << " tier " << isa_name(tier) << " threads "
              << tp->n_threads();
        }
      }
    }
  }
  set_isa_for_testing(start);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTiers,
    ::testing::Values(  // 4 heads a KV head (groups of 4), 3, 2 and 1; head_dim 64, 128, 24, 8
        Shape{16, 4, 64, 16, kF16}, Shape{16, 4, 64, 16, kF32}, Shape{8, 2, 128, 16, kF16},
        Shape{9, 3, 64, 16, kF16}, Shape{8, 4, 64, 1, kF32}, Shape{6, 2, 24, 16, kF32},
        Shape{5, 5, 128, 32, kF32}, Shape{8, 2, 8, 16, kF16}, Shape{16, 4, 64, 16, kQ4},
        Shape{16, 4, 64, 16, kKivi2}, Shape{8, 2, 24, 16, kKivi2, 0}, Shape{16, 4, 64, 16, kQ8}),
    [](const ::testing::TestParamInfo<Shape>& pi) { return shape_name(pi.param); });

}  // namespace
}  // namespace omnibus
