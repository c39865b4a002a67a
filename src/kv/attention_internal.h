// Internal to the paged attention kernels (attention.cc, attention_avx2.cc,
// attention_avx512.cc):
// the unit of parallel work and the per-task kernels that attention.cc
// dispatches to. Not part of the kernels API; model code uses attention.h.
//
// A task is one sequence's tokens [tok0, tok0 + n_tok) of its chunk and query
// heads [head0, head0 + n_heads), all inside one KV head's group, so every K/V
// row a task loads is shared by all its queries. Each query's arithmetic is
// the same whatever task it lands in (the grouping only changes loop order
// across queries), which is what makes the output batch-invariant:
//   for each tile of kTile context positions, aligned to absolute positions,
//   in increasing order: scores of the query's visible keys in the tile
//   (dot products in groups of 8, masked keys neither loaded nor counted),
//   then one online-softmax update (running max m, sum l, accumulator acc).
//
// Thread-safety: a task writes only its own queries' rows of `out`.
#pragma once

#include <cstdint>

#include "kv/attention.h"

namespace omnibus {

constexpr int kAttnTile = 32;  // context positions per online-softmax update

struct AttnTask {
  int32_t seq;   // index into the call's AttentionSeq array
  int32_t tok0;  // first query token, relative to the sequence's chunk
  int32_t n_tok;
  int32_t head0;    // first query head
  int32_t n_heads;  // query heads, all in KV head head0 / n_rep
};

// Visible key positions [lo, hi) of a query at absolute position pos.
inline void attn_visible_range(const AttentionSeq& s, int32_t pos, int32_t* lo, int32_t* hi) {
  *hi = s.bidirectional ? s.n_past + s.n_tokens : pos + 1;
  *lo = s.sliding_window > 0 && pos + 1 - s.sliding_window > 0 ? pos + 1 - s.sliding_window : 0;
}

// wide: the tile kernel of the avx512 tier (attn::avx512 below) takes the
// groups of float rows, up to 4 queries at a time; bitwise the same output.
// REQUIRES: cpu_features().use_avx2(), head_dim % 8 == 0; wide only where
// isa() >= Isa::kAvx512.
void attention_task_avx2(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                         const AttentionParams& p, const AttnTask& t, float* out, bool wide);
// Queues the K/V rows of the task's first tile for prefetching while the
// calling thread's next attention_task_avx2 runs its last tiles (the kernel
// prefetches its own later tiles itself): called for the task or two that
// come next. No effect on results.
// REQUIRES: cpu_features().use_avx2().
void attention_prefetch_task_avx2(const PagedKvLayer& kv, const AttentionSeq& s,
                                  const AttentionParams& p, const AttnTask& t);
// A query's state through its tiles (the avx2 and avx512 kernels').
struct AttnQuery {
  const float* q;
  float* out;
  float m, l;      // running max and sum of the online softmax
  int32_t lo, hi;  // visible positions [lo, hi)
  int32_t qlim;    // q4, kivi2: keys below are read quantized, the rest (its fp16 window) in fp16
};

// The avx512 tier's tile kernel (attention_avx512.cc): a group of n (1..4)
// queries with the same visible keys [a, b) of a tile of float rows (kr[j],
// vr[j] for j in [a, b); `zero`: hd zeros) through scores, the softmax step
// and P.V into acc_k[0..hd), as attention_avx2.cc's group_tile does, bit for
// bit. REQUIRES: isa() >= Isa::kAvx512, hd % 8 == 0, 0 <= a < b <= kAttnTile.
struct AttnPrefetchQueue;
namespace attn::avx512 {
void group_tile(AttnQuery* qs, int n, float* const* acc, int a, int b, const AttentionParams& p,
                const float* const* kr, const float* const* vr, const float* zero, int hd,
                AttnPrefetchQueue& pf);
// The same on f16 rows as stored (each element converted exactly as it is
// loaded: the same bits as on the rows widened to f32).
void group_tile(AttnQuery* qs, int n, float* const* acc, int a, int b, const AttentionParams& p,
                const uint16_t* const* kr, const uint16_t* const* vr, const uint16_t* zero, int hd,
                AttnPrefetchQueue& pf);
}  // namespace attn::avx512

// Portable scalar version of the same algorithm (any head_dim).
void attention_task_scalar(const float* q, const PagedKvLayer& kv, const AttentionSeq& s,
                           const AttentionParams& p, const AttnTask& t, float* out);

// dst[0..n) = fp16(src[0..n)), round to nearest even. REQUIRES: use_avx2().
void store_f16_avx2(const float* src, uint16_t* dst, int64_t n);
// dst[0..n) = f32(src[0..n)). REQUIRES: use_avx2().
void load_f16_avx2(const uint16_t* src, float* dst, int64_t n);

// Quantized formats (q8, q4, kivi2): rows [j0, j1) of KV head h of sequence
// s, dequantized from the block into y [j1 - j0, head_dim] (KIVI keys of q4
// and kivi2: the quantized view; rows of a group still open are left as zeros).
// REQUIRES: use_avx2(), head_dim % 8 == 0.
void kv_dequant_rows_avx2(const PagedKvLayer& kv, const AttentionSeq& s, bool is_v, int h,
                          int32_t j0, int32_t j1, float* y);

// kv_hadamard over blocks of n (a power of two >= 8) channels: the same
// butterflies in the same order as the scalar transform, so the same bits.
// REQUIRES: use_avx2(), hd % n == 0.
void kv_hadamard_avx2(float* x, int hd, int n);

// Store-side quantization (kv_quant_store_avx2.cc): the same bytes as the
// scalar codecs of kv_quant.cc. All REQUIRE use_avx2().
// [lo, hi] of x[0..n). REQUIRES: n % 8 == 0, n >= 8.
void kv_minmax_avx2(const float* x, int n, float* lo, float* hi);
// Per channel c of x [n_rows, hd]: lo[c], hi[c] over the rows. REQUIRES: hd % 8 == 0.
void kv_channel_minmax_avx2(const float* x, int n_rows, int hd, float* lo, float* hi);
// b-bit row codes (byte j holds channels j + k*q at bits b*k, q = hd*b/8),
// levels of x against {d, m} per channel or d[0], m[0] for the row.
// REQUIRES: q % 16 == 0.
void kv_pack_row_avx2(uint8_t* codes, int hd, int bits, const float* x, const float* d,
                      const float* m, bool per_channel);

}  // namespace omnibus
