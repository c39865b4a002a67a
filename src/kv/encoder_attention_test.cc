// encoder_attention against a double-precision reference, and its bits
// independent of neighbours, threads and the task split.
#include "kv/encoder_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

struct Inputs {
  std::vector<float> q, k, v;
  std::vector<EncoderSeq> seqs;
  int64_t n_tok = 0;
};

Inputs make_inputs(const AttentionParams& p, const std::vector<int32_t>& lens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  Inputs in;
  for (int32_t n : lens) {
    in.seqs.push_back(EncoderSeq{int32_t(in.n_tok), n});
    in.n_tok += n;
  }
  in.q.resize(size_t(in.n_tok * p.n_head * p.head_dim));
  in.k.resize(size_t(in.n_tok * p.n_kv_head * p.head_dim));
  in.v.resize(in.k.size());
  for (auto* vec : {&in.q, &in.k, &in.v}) {
    for (float& x : *vec) x = nd(rng);
  }
  return in;
}

std::vector<double> reference(const Inputs& in, const AttentionParams& p) {
  const int hd = p.head_dim;
  const int64_t qs = int64_t(p.n_head) * hd, ks = int64_t(p.n_kv_head) * hd;
  std::vector<double> out(in.q.size());
  for (const EncoderSeq& s : in.seqs) {
    for (int32_t i = 0; i < s.n; ++i) {
      for (int h = 0; h < p.n_head; ++h) {
        const int kvh = h / (p.n_head / p.n_kv_head);
        std::vector<double> sc(size_t(s.n));
        double m = -INFINITY;
        for (int32_t j = 0; j < s.n; ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += double(in.q[size_t((s.first + i) * qs + h * hd + d)]) *
                   in.k[size_t((s.first + j) * ks + kvh * hd + d)];
          sc[size_t(j)] = dot * p.scale;
          m = std::max(m, sc[size_t(j)]);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int32_t j = 0; j < s.n; ++j)
            acc += sc[size_t(j)] * in.v[size_t((s.first + j) * ks + kvh * hd + d)];
          out[size_t((s.first + i) * qs + h * hd + d)] = acc / l;
        }
      }
    }
  }
  return out;
}

std::vector<float> run_scalar(const Inputs& in, const AttentionParams& p) {
  std::vector<float> out(in.q.size(), NAN);
  for (const EncoderSeq& s : in.seqs) {
    for (int h = 0; h < p.n_head; ++h) {
      encoder_attention_task_scalar(in.q.data(), in.k.data(), in.v.data(), p,
                                    EncoderTask{s, 0, s.n, h}, out.data());
    }
  }
  return out;
}

std::vector<float> run(const Inputs& in, const AttentionParams& p, ThreadPool& pool) {
  std::vector<float> out(in.q.size(), NAN);
  encoder_attention(in.q.data(), in.k.data(), in.v.data(), in.seqs.data(), int(in.seqs.size()), p,
                    out.data(), pool);
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    ASSERT_LE(std::fabs(got[i] - want[i]), 2e-5 * (1 + std::fabs(want[i])))
        << "i=" << i << " got " << got[i] << " want " << want[i];
  }
}

const std::vector<int32_t> kLens = {37, 1, 70, 6, 130, 16};

// head_dim 32 (all-MiniLM), 64, 24 (a 16-channel pass and an 8-channel one),
// 12 (scalar kernel only); MHA and GQA.
const AttentionParams kShapes[] = {
    {12, 12, 32, 1.f / std::sqrt(32.f)},
    {8, 2, 64, 0.125f},
    {6, 3, 24, 1.f / std::sqrt(24.f)},
    {4, 4, 12, 1.f / std::sqrt(12.f)},
};

TEST(EncoderAttention, MatchesDoubleReference) {
  ThreadPool pool(3);
  uint32_t seed = 1;
  for (const AttentionParams& p : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "head_dim " << p.head_dim << " heads " << p.n_head << "/" << p.n_kv_head);
    const Inputs in = make_inputs(p, kLens, seed++);
    const std::vector<double> want = reference(in, p);
    expect_close(run(in, p, pool), want);  // AVX2 where the CPU has it and head_dim % 8 == 0
    expect_close(run_scalar(in, p), want);
  }
}

// A sequence's output, bit for bit: alone or among others, on 1 or 3 threads.
TEST(EncoderAttention, SequenceBitsIndependentOfNeighboursAndThreads) {
  ThreadPool one(1), three(3);
  for (const AttentionParams& p : kShapes) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << p.head_dim);
    const Inputs all = make_inputs(p, kLens, 7);
    const std::vector<float> together = run(all, p, three);
    ASSERT_EQ(std::memcmp(run(all, p, one).data(), together.data(), together.size() * 4), 0);
    const int64_t qs = int64_t(p.n_head) * p.head_dim, ks = int64_t(p.n_kv_head) * p.head_dim;
    for (const EncoderSeq& s : all.seqs) {
      Inputs alone;
      alone.n_tok = s.n;
      alone.seqs = {EncoderSeq{0, s.n}};
      alone.q.assign(all.q.begin() + s.first * qs, all.q.begin() + (s.first + s.n) * qs);
      alone.k.assign(all.k.begin() + s.first * ks, all.k.begin() + (s.first + s.n) * ks);
      alone.v.assign(all.v.begin() + s.first * ks, all.v.begin() + (s.first + s.n) * ks);
      const std::vector<float> got = run(alone, p, one);
      ASSERT_EQ(std::memcmp(got.data(), together.data() + s.first * qs, got.size() * 4), 0)
          << "sequence at " << s.first;
    }
  }
}

TEST(EncoderAttention, OneKeyReturnsItsValue) {
  ThreadPool pool(1);
  const AttentionParams p{2, 1, 16, 0.25f};
  const Inputs in = make_inputs(p, {1}, 3);
  const std::vector<float> out = run(in, p, pool);
  for (int h = 0; h < 2; ++h) {
    for (int d = 0; d < 16; ++d) EXPECT_FLOAT_EQ(out[size_t(h * 16 + d)], in.v[size_t(d)]);
  }
}

}  // namespace
}  // namespace omnibus
