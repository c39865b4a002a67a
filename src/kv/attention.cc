// kv_store, the task split and dispatch of paged_attention, and the portable
// scalar per-task kernel (see attention_internal.h for the algorithm).
#include "kv/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "kv/attention_internal.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_kivi.h"
#include "kv/kv_quant_paged.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

void check_layer(const PagedKvLayer& kv) {
  OMNIBUS_CHECK(kv_format_supports_head_dim(kv.format, kv.head_dim));
  OMNIBUS_CHECK(kv.block_size > 0 && kv.n_kv_heads > 0 && kv.head_dim > 0);
  OMNIBUS_CHECK(kv.k != nullptr && kv.v != nullptr);
  OMNIBUS_CHECK(kv_has_residual(kv.format) == (kv.kivi != nullptr));
}

// Element offset of (position pos, KV head h) in the pool.
inline int64_t kv_offset(const PagedKvLayer& kv, const AttentionSeq& s, int32_t pos, int h) {
  const int64_t block = s.block_table[pos / kv.block_size];
  return ((block * kv.n_kv_heads + h) * kv.block_size + pos % kv.block_size) * kv.head_dim;
}

void store_row(const PagedKvLayer& kv, void* pool, int64_t off, const float* src, bool avx2) {
  if (kv.format == KvFormat::kF32) {
    std::memcpy(static_cast<float*>(pool) + off, src, kv.head_dim * sizeof(float));
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(pool) + off;
  if (avx2) return store_f16_avx2(src, dst, kv.head_dim);
  for (int d = 0; d < kv.head_dim; ++d) dst[d] = fp32_to_fp16(src[d]);
}

// Scalar kernel: element loads of an f32 / f16 pool.
inline float load_elem(const float* p, int d) { return p[d]; }
inline float load_elem(const uint16_t* p, int d) { return fp16_to_fp32(p[d]); }

// One task in scalar code: per query token and head, an online softmax over
// tiles of kAttnTile positions. read_row(is_v, j, kv_head, pos, dst) gives
// position j's K or V row as seen by the query at pos.
template <class ReadRow>
void task_scalar_rows(const float* q, const AttentionSeq& s, const AttentionParams& p,
                      const AttnTask& t, float* out, ReadRow read_row) {
  const int hd = p.head_dim;
  const int n_rep = p.n_head / p.n_kv_head;
  const int kvh = t.head0 / n_rep;
  thread_local std::vector<float> acc, row;
  acc.resize(static_cast<size_t>(hd));
  row.resize(static_cast<size_t>(hd));
  float sc[kAttnTile];
  for (int ti = 0; ti < t.n_tok; ++ti) {
    const int32_t tok = t.tok0 + ti;
    const int32_t pos = s.n_past + tok;
    int32_t lo, hi;
    attn_visible_range(s, pos, &lo, &hi);
    for (int hi_ = 0; hi_ < t.n_heads; ++hi_) {
      const int h = t.head0 + hi_;
      const float* qh = q + (static_cast<int64_t>(s.first_token + tok) * p.n_head + h) * hd;
      float m = -INFINITY, l = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int32_t base = lo / kAttnTile * kAttnTile; base < hi; base += kAttnTile) {
        const int32_t a = std::max(lo, base), b = std::min(hi, base + kAttnTile);
        float tmax = -INFINITY;
        for (int32_t j = a; j < b; ++j) {
          read_row(false, j, kvh, pos, row.data());
          float dot = 0.f;
          for (int d = 0; d < hd; ++d) dot += qh[d] * row[d];
          float x = dot * p.scale;
          if (p.softcap > 0.f) x = p.softcap * std::tanh(x / p.softcap);
          sc[j - base] = x;
          tmax = std::max(tmax, x);
        }
        const float m_new = std::max(m, tmax);
        const float alpha = std::exp(m - m_new);
        float tsum = 0.f;
        for (int d = 0; d < hd; ++d) acc[d] *= alpha;
        for (int32_t j = a; j < b; ++j) {
          const float pj = std::exp(sc[j - base] - m_new);
          tsum += pj;
          read_row(true, j, kvh, pos, row.data());
          for (int d = 0; d < hd; ++d) acc[d] += pj * row[d];
        }
        l = l * alpha + tsum;
        m = m_new;
      }
      float* o = out + (static_cast<int64_t>(s.first_token + tok) * p.n_head + h) * hd;
      const float inv = 1.f / l;
      for (int d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  }
}

// f32 / f16 pools: rows read in place.
template <typename T>
void task_scalar(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                 const AttentionParams& p, const AttnTask& t, float* out) {
  const T* kpool = static_cast<const T*>(kv.k);
  const T* vpool = static_cast<const T*>(kv.v);
  task_scalar_rows(q, s, p, t, out, [&](bool is_v, int32_t j, int kvh, int32_t, float* dst) {
    const T* r = (is_v ? vpool : kpool) + kv_offset(kv, s, j, kvh);
    for (int d = 0; d < p.head_dim; ++d) dst[d] = load_elem(r, d);
  });
}

// Quantized formats: each K/V row read through kv_read_row (the reference
// reader), same tiling and reduction order as task_scalar.
void task_scalar_quant(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                       const AttentionParams& p, const AttnTask& t, float* out) {
  task_scalar_rows(q, s, p, t, out, [&](bool is_v, int32_t j, int kvh, int32_t pos, float* dst) {
    kv_read_row(kv, s, is_v, j, kvh, pos, dst);
  });
}

}  // namespace

void attention_task_scalar(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                           const AttentionParams& p, const AttnTask& t, float* out) {
  if (kv.format == KvFormat::kF32) return task_scalar<float>(q, kv, s, p, t, out);
  if (kv.format == KvFormat::kF16) return task_scalar<uint16_t>(q, kv, s, p, t, out);
  task_scalar_quant(q, kv, s, p, t, out);
}

void kv_store(const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs, const float* k,
              const float* v) {
  check_layer(kv);
  if (kv_has_residual(kv.format)) return kivi_store(kv, seqs, n_seqs, k, v);
  const bool avx2 = cpu_features().use_avx2() && kv.head_dim % 8 == 0;
  if (kv_format_quantized(kv.format)) {
    for (int i = 0; i < n_seqs; ++i) {
      const AttentionSeq& s = seqs[i];
      for (int32_t t = 0; t < s.n_tokens; ++t) {
        const int64_t row = static_cast<int64_t>(s.first_token + t) * kv.n_kv_heads;
        const int32_t pos = s.n_past + t;
        const int64_t block = s.block_table[pos / kv.block_size];
        for (int h = 0; h < kv.n_kv_heads; ++h) {
          kv_store_row_quantized(kv.format, kv_unit(kv, false, block, h), kv.block_size,
                                 kv.head_dim, pos % kv.block_size, k + (row + h) * kv.head_dim);
          kv_store_row_quantized(kv.format, kv_unit(kv, true, block, h), kv.block_size, kv.head_dim,
                                 pos % kv.block_size, v + (row + h) * kv.head_dim);
        }
      }
    }
    return;
  }
  for (int i = 0; i < n_seqs; ++i) {
    const AttentionSeq& s = seqs[i];
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      const int64_t row = static_cast<int64_t>(s.first_token + t) * kv.n_kv_heads;
      for (int h = 0; h < kv.n_kv_heads; ++h) {
        const int64_t off = kv_offset(kv, s, s.n_past + t, h);
        store_row(kv, kv.k, off, k + (row + h) * kv.head_dim, avx2);
        store_row(kv, kv.v, off, v + (row + h) * kv.head_dim, avx2);
      }
    }
  }
}

void paged_attention(const float* q, const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs,
                     const AttentionParams& p, float* out, ThreadPool& pool) {
  check_layer(kv);
  OMNIBUS_CHECK(p.head_dim == kv.head_dim && p.n_kv_head == kv.n_kv_heads);
  OMNIBUS_CHECK(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  if (kv.kivi != nullptr)
    OMNIBUS_CHECK(kv.kivi->staging().owner == kv.kivi);  // kv_store of this layer ran last
  const int n_rep = p.n_head / p.n_kv_head;

  // Split: tokens in tiles of tok_tile, heads by KV group; if that leaves
  // too few tasks to keep the threads busy, one query head per task. Long
  // chunks take 32 (else 16) tokens a task when that still makes plenty of
  // tasks: a task's queries share every K/V row it loads (and widen f16 rows
  // once). 32 against 16: a 512-token chunk at depth 4096, Llama-1B shape,
  // f16, Zen 5, 3-5% faster (kv_microbench); its 128 queries' accumulators
  // (32 KiB at head_dim 64) and the widened tile still fit a 48 KiB L1.
  auto group_tasks = [&](int32_t tile) {
    int64_t n = 0;
    for (int i = 0; i < n_seqs; ++i) n += (seqs[i].n_tokens + tile - 1) / tile * p.n_kv_head;
    return n;
  };
  const int64_t enough = 8 * pool.n_threads();
  const int32_t tok_tile = group_tasks(32) >= enough ? 32 : group_tasks(16) >= enough ? 16 : 4;
  const int64_t n_group_tasks = group_tasks(tok_tile);
  const int heads_per_task = n_group_tasks >= 2 * pool.n_threads() ? n_rep : 1;
  thread_local std::vector<AttnTask> tasks;  // the engine thread's, reused every call
  tasks.clear();
  for (int i = 0; i < n_seqs; ++i) {
    for (int32_t t0 = 0; t0 < seqs[i].n_tokens; t0 += tok_tile) {
      const int32_t nt = std::min(tok_tile, seqs[i].n_tokens - t0);
      for (int h0 = 0; h0 < p.n_head; h0 += heads_per_task) {
        tasks.push_back(AttnTask{i, t0, nt, h0, heads_per_task});
      }
    }
  }
  const bool avx2 = cpu_features().use_avx2() && p.head_dim % 8 == 0;
  const bool wide = avx2 && isa() >= Isa::kAvx512;
  const AttnTask* task_data = tasks.data();
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  // Threads claim runs of consecutive tasks (a decode step's sequence: its KV
  // heads in order, whose units lie side by side in each block), so a
  // thread's next task is the next of its run, and the kernel prefetches
  // that task's first tile and nothing another thread is about to read.
  // Claimed one at a time, the threads took turns: half the tasks a thread
  // prefetched were the other's, and its own skipped every other head.
  // Llama-1B shape, 64 sequences x 192 positions, f16, 2 threads, Sapphire
  // Rapids Xeon (kv_microbench, A B x2, with the L2 prefetch): 16 layers'
  // caches from DRAM 1.87-1.91 -> 1.32-1.33 ms a layer with runs of 16, one
  // layer's from L3 1.13-1.21 -> 0.96 ms (docs/performance.md, round (s)).
  // Runs shrink to leave at least 8 a thread, for balance where tasks are
  // few (a lone decode, many cores).
  const int64_t run = std::clamp<int64_t>(n_tasks / (8 * pool.n_threads()), 1, 16);
  // The next task's first tile (the kernel prefetches its later tiles as it
  // goes): inside a run it is this thread's; at a run's end, the next run's
  // first is as likely another thread's, so with runs of one (tasks in turn
  // between the threads) the next two are asked for.
  const int64_t ahead = run > 1 ? 1 : 2;
  pool.parallel_for((n_tasks + run - 1) / run, [&](int64_t r, int) {
    const int64_t end = std::min(n_tasks, (r + 1) * run);
    for (int64_t i = r * run; i < end; ++i) {
      const AttnTask& t = task_data[i];
      if (!avx2) {
        attention_task_scalar(q, kv, seqs[t.seq], p, t, out);
        continue;
      }
      for (int64_t k = i + 1; k <= i + ahead && k < n_tasks; ++k) {
        attention_prefetch_task_avx2(kv, seqs[task_data[k].seq], p, task_data[k]);
      }
      attention_task_avx2(q, kv, seqs[t.seq], p, t, out, wide);
    }
  });
}

}  // namespace omnibus
