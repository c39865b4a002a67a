// KIVI residual window of the formats with KIVI keys (kivi2 at 2 bits, q4 at
// 4 bits; KIVI, ICML '24): keys are quantized per channel over a group of
// block_size tokens, so a group can only be quantized once it is complete.
// Until then its rows stay in fp16 here. A query also reads the last
// `residual_blocks` completed groups in fp16 (KIVI's residual of recent tokens;
// kivi2 default 1, q4 0), which is where most of the 2-bit loss is won back:
//
//   query at position p reads key j   quantized  if j < qlim(p) = max(0, floor((p + 1) / bs) - W) *
//   bs
//                                     fp16       otherwise (its open group and the W groups before
//                                     it)
//
// This depends only on (p, j), never on how the prompt was chunked or what
// shared the step, so outputs stay batch-invariant (kv_quant_paged.h: kivi_qlim).
//
// Where the fp16 rows live:
//   - rows written by the current kv_store call: the staging area (the step's
//     new rows in fp16, [n_tok, n_kv_heads, head_dim] K and V, shared by all
//     layers; the layer that wrote it last is recorded and checked);
//   - rows written by earlier calls: a residual slot [n_kv_heads, block_size,
//     head_dim] fp16 K and V, owned by the block (kivi2's values rotated).
//
// Slot life. A slot is claimed when a step ends with the block's group open
// (or, W > 0, when the group seals and a later query of the sequence will read
// it). It stays *pinned* while a query of its sequence can still read it, and
// is released one kv_store call after the sequence has moved past it (the
// call that moved may still read it):
//   - W = 0: released to the free list;
//   - W > 0: *retained*: it keeps the block's rows until another block needs
//     the slot. A prefix-cache hit that ends at block m must let the new
//     sequence read blocks m - W .. m - 1 in fp16, exactly as a recomputation
//     would; holds_rows() says whether they still are, and KvCache::match_prefix
//     cuts the hit back to where they are (KvStorage::usable_prefix). Blocks sealed
//     and left behind within one call (a long prompt chunk) get a retained
//     slot too if one is free, so that a shared prompt can be hit later.
// A kv_store call re-pins the retained slots its sequences read (a hit).
// claim() takes a free slot, else the least recently used retained one, else
// steals the least recently written pinned one: an open victim's keys are
// converted to per-token keys (state kKiviPerToken, lossy), a sealed victim
// is then read quantized; both are counted in n_steals(). A block whose slot
// could not be had starts per-token too. Kernels and the reference reader
// take the same decision from the same state, so they always agree.
//
// Ownership: KvStorage creates one KiviResidual per layer, with the slot count
// plan_kv_cache (kv/kv_cache_size.h) chose; KvCache, which owns the storage and
// the block manager, calls release_block for every block no table holds any
// more and checks the slots in its check_integrity (KiviResidual::check_integrity,
// and no pinned slot on a free block). W is the --kv-residual-blocks setting
// (KvGeometry::kv_residual_blocks).
//
// Thread-safety: kivi_store and kivi_copy_block mutate the residual (engine
// thread only); paged_attention only reads it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kv/attention.h"

namespace omnibus {

struct KiviStaging {
  std::vector<uint16_t> k, v;           // [n_tok, n_kv_heads, head_dim] fp16
  const KiviResidual* owner = nullptr;  // layer whose kv_store filled it last
};

class KiviResidual {
 public:
  // REQUIRES: n_slots >= 0, residual_blocks >= 0; staging outlives this object.
  KiviResidual(int64_t n_blocks, int n_kv_heads, int block_size, int head_dim, int n_slots,
               KiviStaging* staging, int residual_blocks = 0);

  int n_slots() const { return n_slots_; }
  int residual_blocks() const { return residual_blocks_; }
  // Whether a sealed block's fp16 rows are still held (a prefix-cache hit
  // may end right after it only if the W blocks before the end hold them).
  bool holds_rows(int64_t block) const {
    const int32_t s = slot_of_[size_t(block)];
    return s >= 0 && fill_[size_t(s)] == bs_;
  }
  // No sequence holds `block` any more: its slot, if any, is retained (a
  // sealed block's window rows, W > 0) or freed. Engine thread, between steps.
  void release_block(int64_t block);
  int32_t slot_of(int64_t block) const { return slot_of_[size_t(block)]; }
  // Block `block` (sealed, no sequence writing it) now holds rows computed
  // elsewhere (disaggregated prefill/decode, KvStorage::import_window_rows):
  // k and v are its fp16 K and V rows, [n_kv_heads, block_size, head_dim]
  // each. Gives it a retained full slot holding them, as a sealed block left
  // behind keeps: its own slot unless pinned (then it already holds these
  // rows and is left alone), else a free or least recently used retained
  // one (never a stolen pinned one). False when there was none.
  // REQUIRES: residual_blocks() > 0. Engine thread, between steps.
  bool adopt_rows(int64_t block, const uint16_t* k, const uint16_t* v);
  // Whether `block`'s slot is pinned (owned and not retained): only blocks
  // some sequence holds may be.
  bool pins(int64_t block) const {
    const int32_t s = slot_of_[size_t(block)];
    return s >= 0 && !retained_[size_t(s)];
  }
  // f(block) for each block whose slot is pinned.
  template <class F>
  void for_each_pinned_block(F&& f) const {
    for (int32_t s = 0; s < n_slots_; ++s) {
      if (owner_[size_t(s)] >= 0 && !retained_[size_t(s)]) f(owner_[size_t(s)]);
    }
  }
  // Aborts unless every slot is free (in the free list once) or owned by the
  // one block whose slot it is, and retained slots hold full groups (W > 0).
  void check_integrity() const;
  uint64_t n_steals() const { return n_steals_; }
  uint64_t n_no_slot() const { return n_no_slot_; }
  size_t slot_bytes() const;  // fp16 K + V of one slot

  // fp16 row of a slot.
  uint16_t* row(int32_t slot, bool is_v, int h, int r) {
    return (is_v ? v_ : k_).data() + ((size_t(slot) * n_kv_ + h) * bs_ + r) * hd_;
  }
  const uint16_t* row(int32_t slot, bool is_v, int h, int r) const {
    return (is_v ? v_ : k_).data() + ((size_t(slot) * n_kv_ + h) * bs_ + r) * hd_;
  }
  KiviStaging& staging() const { return *staging_; }

 private:
  friend void kivi_store(const PagedKvLayer&, const AttentionSeq*, int, const float*, const float*);
  friend void kivi_copy_block(const PagedKvLayer&, int64_t, int64_t);

  void begin_call();
  // A slot for `block`: a free one, else the least recently used retained
  // one, else (unless `soft`) a stolen pinned one (an open victim's keys
  // converted to per-token keys); -1 if none.
  int32_t claim(const PagedKvLayer& kv, int64_t block, int32_t avoid, bool soft = false);
  // The free or least recently used retained slot but `avoid` (its block
  // then no longer holds it), not yet given to any block; -1 if none.
  int32_t take_spare(int32_t avoid);
  int32_t lru_retained(int32_t avoid) const;  // the retained slot used least recently, or -1
  void release(int32_t slot);                 // to the free list
  // No longer pinned: retained if it holds a sealed block's window rows
  // (W > 0), else released.
  void unpin(int32_t slot);
  void pin(int64_t block);  // a query of this call reads the block's rows

  const int n_kv_, bs_, hd_, n_slots_, residual_blocks_;
  KiviStaging* const staging_;
  std::vector<uint16_t> k_, v_;    // [n_slots, n_kv, bs, hd]
  std::vector<int32_t> slot_of_;   // [n_blocks]: slot or -1
  std::vector<int64_t> owner_;     // [n_slots]: block or -1
  std::vector<int32_t> fill_;      // [n_slots]: rows [0, fill) written
  std::vector<uint64_t> stamp_;    // [n_slots]: call of the last write or pin
  std::vector<uint8_t> retained_;  // [n_slots]: 1 = owned but no longer pinned (W > 0)
  std::vector<int32_t> free_;
  std::vector<std::pair<int32_t, int64_t>>
      pending_;  // (slot, block) left behind: released next call
  uint64_t calls_ = 0;
  uint64_t n_steals_ = 0, n_no_slot_ = 0;
};

// kv_store for the formats with KIVI keys (kv.kivi != nullptr).
void kivi_store(const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs, const float* k,
                const float* v);

// After the block units of src were copied to dst: gives dst its own copy of
// src's residual rows (copy-on-write of an open group; a sealed block's
// window rows too, if src still holds them).
void kivi_copy_block(const PagedKvLayer& kv, int64_t src, int64_t dst);

// The fp16 row of key/value j for a query that reads it in fp16 (j >= qlim),
// or nullptr when the block holds per-token keys or its slot was lost (then
// the row is read quantized).
// REQUIRES: j < s.n_past + s.n_tokens, the staging filled by this layer.
const uint16_t* kivi_f16_row(const PagedKvLayer& kv, const AttentionSeq& s, int kvh, int32_t j,
                             bool is_v);

}  // namespace omnibus
