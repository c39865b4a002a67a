// Paged attention: scaled dot-product attention whose keys and values live in
// fixed-size blocks of a shared pool, reached through per-sequence block
// tables (PagedAttention, vLLM). One call covers every sequence of an engine
// step: prompt chunks (causal inside the chunk, full over what is cached
// before it) and single decode tokens alike — there is no separate prefill
// and decode kernel. Grouped-query attention: query head h reads KV head
// h / (n_head / n_kv_head).
//
// KV pool layout, per layer, for K and for V separately:
//   [n_blocks, n_kv_heads] units of block_size rows of head_dim elements
//   (f32, f16; or a quantized format: q8, q4, kivi2, see kv/kv_quant.h)
// Token at position p of a sequence lives in block block_table[p / block_size]
// at row p % block_size. Quantized formats are quantized by kv_store and
// dequantized inside the attention kernel, a tile of rows at a time (never a
// full-precision copy of the cache). q4 and kivi2 (KIVI keys) also keep the
// rows of each still-open key group, and of the residual window, in fp16
// (kv/kv_quant_kivi.h).
//
// Batch invariance: out for one (token, head) is computed by one thread, over
// context positions in increasing order, with one fixed reduction order; it
// does not depend on the other sequences in the step, on chunking, or on the
// thread count (the tests check this bit for bit). Algorithm: an online
// softmax over tiles of 32 positions aligned to absolute positions
// (attention_internal.h). Work is split into tasks of up to 4 tokens (16
// or 32 in long chunks) x the query heads of one KV head, so each K/V row
// is loaded once per task (GQA); with few tasks (a lone decode) it splits
// per query head instead.
// Kernels: AVX2 when head_dim % 8 == 0 (fast for 64..256), otherwise a
// portable scalar kernel. Against paged_attention_ref (double precision, same
// dequantized values), the output agrees to ~1e-5 relative. Scratch is thread_local and reused: no
// heap allocation once warm.
//
// Thread-safety: paged_attention writes only `out`; kv_store writes only the
// slots named by the block tables. The caller guarantees no two sequences in a
// call write the same slot.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_format.h"

namespace omnibus {

class ThreadPool;
class KiviResidual;

// One layer's K and V pools.
struct PagedKvLayer {
  KvFormat format;  // f32, f16, q8, q4, kivi2 (layouts: kv_quant.h)
  void* k;          // [n_blocks, n_kv_heads] units (kv_unit_bytes(format, ...).k each)
  void* v;          // [n_blocks, n_kv_heads] units (.v each)
  int block_size;
  int n_kv_heads;
  int head_dim;
  KiviResidual* kivi = nullptr;  // q4, kivi2 (kv_has_residual): the layer's fp16 residual
};

// One sequence's part of a step.
struct AttentionSeq {
  int32_t first_token;         // index of its first query row in the step's flat token list
  int32_t n_tokens;            // query rows (chunk length; 1 for a decode)
  int32_t n_past;              // tokens cached before this chunk; the chunk is positions
                               // [n_past, n_past + n_tokens)
  const int32_t* block_table;  // blocks covering positions [0, n_past + n_tokens); < 0
                               // where no query of the call sees any position (a
                               // sliding-window group's, kv/kv_layer_groups.h)
  int32_t sliding_window;      // 0: full attention; w > 0: query at p sees keys (p - w, p]
  // An encoder's attention (BERT): every query of the chunk sees every key
  // of [0, n_past + n_tokens) (no sliding window); false: causal.
  bool bidirectional = false;
};

struct AttentionParams {
  int n_head;
  int n_kv_head;
  int head_dim;
  float scale;          // usually 1/sqrt(head_dim)
  float softcap = 0.f;  // 0: off; c > 0: scores = c * tanh(scores / c)
};

// Writes the step's new keys and values into their slots.
// k, v: [n_tok_total, n_kv_heads, head_dim] f32, rows ordered as the sequences' tokens.
void kv_store(const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs, const float* k,
              const float* v);

// q: [n_tok_total, n_head, head_dim] f32 (already rotated); out: same shape.
// REQUIRES: kv_store for this step's tokens ran before (a chunk attends to itself).
void paged_attention(const float* q, const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs,
                     const AttentionParams& p, float* out, ThreadPool& pool);

// Scalar reference: gathers each sequence's keys/values to f32 and does
// textbook attention. The definition of correct.
void paged_attention_ref(const float* q, const PagedKvLayer& kv, const AttentionSeq* seqs,
                         int n_seqs, const AttentionParams& p, float* out);

}  // namespace omnibus
