// Attention of an encoder's prompts over themselves (BERT): every query of a
// sequence sees every key of the same sequence, both ways, with K and V read
// straight from the step's projections in f32. An encoder computes each
// prompt whole in one step and never again, so it needs no KV cache, and a
// query block can share one transposed copy of its head's keys.
//
// Layout: q and out [n_tok, n_head * head_dim], k and v [n_tok, n_kv_head *
// head_dim]; sequence i is rows [seqs[i].first, seqs[i].first + seqs[i].n).
// GQA: query head h reads KV head h / (n_head / n_kv_head).
// Per (token, head), over the sequence's n keys:
//   s_j = scale * (q . k_j)   one FMA chain over d, in increasing d
//   p_j = exp(s_j - max s),  l = sum p_j,  out = (sum_j p_j v_j, increasing j) / l
// An output depends only on its own sequence's rows: not on the other
// sequences of the call, the thread count or the split into tasks (bit for
// bit). AVX2 kernel when head_dim % 8 == 0, else a scalar one; against a
// double-precision reference both agree to ~1e-5 relative.
//
// Thread-safety: writes only `out`; scratch is thread_local.
#pragma once

#include <cstdint>

#include "kv/attention.h"

namespace omnibus {

class ThreadPool;

struct EncoderSeq {
  int32_t first;  // its first row
  int32_t n;      // its tokens (>= 1)
};

// REQUIRES: p.softcap == 0, n_head % n_kv_head == 0, sequences disjoint.
void encoder_attention(const float* q, const float* k, const float* v, const EncoderSeq* seqs,
                       int n_seqs, const AttentionParams& p, float* out, ThreadPool& pool);

// One task's kernels (encoder_attention.cc splits the work): query rows
// [t0, t0 + nt) of sequence s, query head h. The AVX2 one REQUIRES
// cpu_features().use_avx2() and head_dim % 8 == 0.
struct EncoderTask {
  EncoderSeq s;
  int32_t t0, nt;
  int32_t head;
};
void encoder_attention_task_avx2(const float* q, const float* k, const float* v,
                                 const AttentionParams& p, const EncoderTask& t, float* out);
void encoder_attention_task_scalar(const float* q, const float* k, const float* v,
                                   const AttentionParams& p, const EncoderTask& t, float* out);

}  // namespace omnibus
