// Work split and the scalar kernel of encoder attention (contract:
// encoder_attention.h).
#include "kv/encoder_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus {
namespace {

// Query rows per task: enough to pay for the task's transposed copy of its
// keys (one pass over them against 64 passes of scores), few enough that a
// short prompt still spreads over the threads by heads.
constexpr int32_t kQueriesPerTask = 64;

}  // namespace

void encoder_attention_task_scalar(const float* q, const float* k, const float* v,
                                   const AttentionParams& p, const EncoderTask& t, float* out) {
  const int hd = p.head_dim;
  const int64_t q_stride = int64_t(p.n_head) * hd, kv_stride = int64_t(p.n_kv_head) * hd;
  const int kvh = t.head / (p.n_head / p.n_kv_head);
  const int32_t n = t.s.n;
  thread_local std::vector<float> s, acc;
  s.resize(size_t(n));
  acc.resize(size_t(hd));
  for (int32_t i = t.t0; i < t.t0 + t.nt; ++i) {
    const float* qi = q + (t.s.first + i) * q_stride + t.head * hd;
    float m = -INFINITY;
    for (int32_t j = 0; j < n; ++j) {
      const float* kj = k + (t.s.first + j) * kv_stride + kvh * hd;
      float dot = 0.f;
      for (int d = 0; d < hd; ++d) dot = std::fma(qi[d], kj[d], dot);
      s[size_t(j)] = dot * p.scale;
      m = std::max(m, s[size_t(j)]);
    }
    float l = 0.f;
    std::fill(acc.begin(), acc.end(), 0.f);
    for (int32_t j = 0; j < n; ++j) {
      const float pj = std::exp(s[size_t(j)] - m);
      l += pj;
      const float* vj = v + (t.s.first + j) * kv_stride + kvh * hd;
      for (int d = 0; d < hd; ++d) acc[size_t(d)] = std::fma(pj, vj[d], acc[size_t(d)]);
    }
    float* o = out + (t.s.first + i) * q_stride + t.head * hd;
    for (int d = 0; d < hd; ++d) o[d] = acc[size_t(d)] / l;
  }
}

void encoder_attention(const float* q, const float* k, const float* v, const EncoderSeq* seqs,
                       int n_seqs, const AttentionParams& p, float* out, ThreadPool& pool) {
  OMNIBUS_CHECK(p.softcap == 0.f && p.n_kv_head >= 1 && p.n_head % p.n_kv_head == 0);
  thread_local std::vector<EncoderTask> tasks;  // the calling thread's, reused every call
  tasks.clear();
  for (int i = 0; i < n_seqs; ++i) {
    OMNIBUS_CHECK(seqs[i].n >= 1);
    for (int32_t t0 = 0; t0 < seqs[i].n; t0 += kQueriesPerTask) {
      const int32_t nt = std::min(kQueriesPerTask, seqs[i].n - t0);
      for (int h = 0; h < p.n_head; ++h) tasks.push_back(EncoderTask{seqs[i], t0, nt, h});
    }
  }
  const bool simd = cpu_features().use_avx2() && p.head_dim % 8 == 0;
  const EncoderTask* task = tasks.data();
  pool.parallel_for(int64_t(tasks.size()), [&](int64_t i, int) {
    if (simd) {
      encoder_attention_task_avx2(q, k, v, p, task[i], out);
    } else {
      encoder_attention_task_scalar(q, k, v, p, task[i], out);
    }
  });
}

}  // namespace omnibus
