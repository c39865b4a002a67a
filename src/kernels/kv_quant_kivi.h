// KIVI residual window of the formats with KIVI keys (kivi2 at 2 bits, q4 at
// 4 bits; KIVI, ICML '24): keys are quantized per channel over a group of
// block_size tokens, so a group can only be quantized once it is complete.
// Until then its rows stay in fp16 here, and a query reads the keys/values of
// its own, still open group in fp16 (kivi2's values rotated, kv_hadamard):
//
//   query at position p reads key j   quantized  if j < qlim(p) = floor((p + 1) / bs) * bs
//                                     fp16       otherwise (j in p's open group)
//
// This depends only on (p, j), never on how the prompt was chunked or what
// shared the step, so outputs stay batch-invariant.
//
// Where the fp16 rows live:
//   - rows written by the current kv_store call: the staging area (the step's
//     new rows in fp16, [n_tok, n_kv_heads, head_dim] K and V, shared by all
//     layers; the layer that wrote it last is recorded and checked);
//   - rows written by earlier steps of a group that is still open: a residual
//     slot [n_kv_heads, block_size, head_dim] fp16 K and V, owned by the block.
// A slot is claimed when a step ends with the block's group open, and released
// one kv_store call after the group is sealed (the step that sealed it may
// still read it). A block freed while open keeps its slot until the block is
// written from row 0 again (reused) or the slot is stolen: when no slot is
// free, the least recently written one is taken and its block converted to
// per-token keys (state kKiviPerToken, lossy, counted in n_steals()).
// A block whose slot could not be had starts in that state too.
//
// Thread-safety: kivi_store and kivi_copy_block mutate the residual (engine
// thread only); paged_attention only reads it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/attention.h"

namespace omnibus {

struct KiviStaging {
  std::vector<uint16_t> k, v;     // [n_tok, n_kv_heads, head_dim] fp16
  const KiviResidual* owner = nullptr;  // layer whose kv_store filled it last
};

class KiviResidual {
 public:
  // REQUIRES: n_slots >= 0; staging outlives this object.
  KiviResidual(int64_t n_blocks, int n_kv_heads, int block_size, int head_dim, int n_slots,
               KiviStaging* staging);

  int n_slots() const { return n_slots_; }
  int32_t slot_of(int64_t block) const { return slot_of_[size_t(block)]; }
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
  // A free slot for `block`, stealing the least recently written one if
  // needed (its block converted to per-token keys); -1 if none.
  int32_t claim(const PagedKvLayer& kv, int64_t block, int32_t avoid);
  void release(int32_t slot);

  const int n_kv_, bs_, hd_, n_slots_;
  KiviStaging* const staging_;
  std::vector<uint16_t> k_, v_;      // [n_slots, n_kv, bs, hd]
  std::vector<int32_t> slot_of_;     // [n_blocks]: slot or -1
  std::vector<int64_t> owner_;       // [n_slots]: block or -1
  std::vector<int32_t> fill_;        // [n_slots]: rows [0, fill) written
  std::vector<uint64_t> stamp_;      // [n_slots]: call of the last write
  std::vector<int32_t> free_;
  std::vector<std::pair<int32_t, int64_t>> pending_;  // sealed: (slot, block), released next call
  uint64_t calls_ = 0;
  uint64_t n_steals_ = 0, n_no_slot_ = 0;
};

// kv_store for the formats with KIVI keys (kv.kivi != nullptr).
void kivi_store(const PagedKvLayer& kv, const AttentionSeq* seqs, int n_seqs, const float* k,
                const float* v);

// After the block units of src were copied to dst: gives dst its own copy of
// src's residual rows (copy-on-write of an open group).
void kivi_copy_block(const PagedKvLayer& kv, int64_t src, int64_t dst);

// The fp16 row a query in key j's open group reads, or nullptr when the block
// holds per-token keys (then every row is read quantized).
// REQUIRES: j < s.n_past + s.n_tokens, the staging filled by this layer.
const uint16_t* kivi_f16_row(const PagedKvLayer& kv, const AttentionSeq& s, int kvh, int32_t j,
                             bool is_v);

}  // namespace omnibus
