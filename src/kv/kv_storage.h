// KvStorage: the memory that holds every layer's keys and values, carved into
// fixed-size blocks of `block_size` token slots. It is allocated once, at
// start-up, page-aligned, and never grows: the number of blocks is what limits
// how many tokens the engine can hold (PagedAttention).
//
// Layout, per layer and for K and V separately (see kv/attention.h):
//   [n_blocks, n_kv_heads] units of block_size rows in the KV format `format`
//   (f32, f16, q8, q4, kivi2: byte layouts in kv/kv_quant.h and
//   docs/kv-quantization.md). Everything a block holds is inside its units,
//   so copy_block copies a block whole; kivi2 and q4 (KIVI keys) additionally
//   keep, per layer, fp16 residual slots for key groups still being filled (a
//   fixed area of fixed_bytes(), kv/kv_quant_kivi.h), which copy_block
//   duplicates too.
//   kivi2 with a window (residual_blocks() = W > 0) also has, after the
//   blocks and inside region(), kKvTransferSlots transfer slots: staging for
//   the fp16 window rows of W blocks, so that disaggregated prefill/decode
//   moves them with the blocks (export_window_rows / import_window_rows).
// With sliding-window KV (kv/kv_layer_groups.h) the pool has one tensor per
// layer of a group rather than per model layer: geometry().n_layers is the
// number of tensors, and layer(il) maps model layer il to its tensor.
// KvStorage knows nothing about which block belongs to whom: that is the block
// manager's job (kv/kv_cache_manager.h); KvCache (kv/kv_cache.h) owns both and
// tells the residual slots when a block is freed. The model only sees block
// tables.
//
// Thread-safety: the storage itself is plain memory. The engine thread owns
// it; kernels write the slots named by the step's block tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/attention.h"
#include "kv/kv_format.h"
#include "kv/kv_layer_groups.h"
#include "kv/kv_quant_kivi.h"
#include "util/status.h"

namespace omnibus {

// Transfer slots of a storage whose format has a window (W > 0): one per
// prompt pinned for, or being imported from, another worker at a time; a pin
// or import that finds none free moves no blocks (the prompt is computed on
// the decode side). 16 covers the pins a prefill worker keeps while decode
// workers pull; each slot costs W * residual_slot_bytes().
inline constexpr int kKvTransferSlots = 16;

struct KvGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  KvFormat format = KvFormat::kF16;
  // kivi2, q4 (kv/kv_quant_kivi.h): --kv-residual-blocks, the completed
  // groups a query still reads in fp16 (-1: the format's default,
  // kv_default_residual_blocks), and fp16 residual slots per layer (-1:
  // 64 * (1 + residual blocks), an open block and its window for 64 running
  // sequences; at most n_blocks; plan_kv_cache sets it).
  int kv_residual_blocks = -1;
  int kv_residual_slots = -1;

  // The settings resolved: 0 for the formats without a residual.
  int residual_blocks() const;
  int residual_slots(int64_t n_blocks) const;
  // fp16 K + V of one residual slot in every layer (0 without a residual).
  size_t residual_slot_bytes() const;
  // One transfer slot: the fp16 window rows of W blocks (0 when W == 0).
  size_t transfer_slot_bytes() const { return size_t(residual_blocks()) * residual_slot_bytes(); }
  // All kKvTransferSlots of them (part of fixed_bytes and of the region).
  size_t transfer_bytes() const { return size_t(kKvTransferSlots) * transfer_slot_bytes(); }

  // Bytes one block occupies across all layers, K and V.
  size_t bytes_per_block() const;
  // bytes_per_block / block_size (what one token costs in the pool).
  size_t bytes_per_token() const { return bytes_per_block() / size_t(block_size); }
  // Memory besides the blocks (kivi2's and q4's residual slots, and the
  // transfer slots when W > 0; their bookkeeping excluded: block tables of
  // ints); 0 for the other formats.
  size_t fixed_bytes(int64_t n_blocks) const;
};

class KvStorage {
 public:
  // Allocates n_blocks blocks (zero-filled). `groups`: how model layers map
  // to the g.n_layers tensors (none given: uniform, layer il in tensor il).
  // With layer groups, q4's and kivi2's residual slots are per tensor and
  // serve every group's blocks (a running sequence pins its slots in each
  // group: plan_kv_cache sizes them so). kInvalidArgument when groups'
  // tensors are not g.n_layers. REQUIRES: n_blocks >= 1.
  static StatusOr<std::unique_ptr<KvStorage>> create(const KvGeometry& g, int64_t n_blocks,
                                                     KvLayerGroups groups = {});
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvGeometry& geometry() const { return geometry_; }
  const KvLayerGroups& groups() const { return groups_; }
  int64_t n_blocks() const { return n_blocks_; }
  // Blocks plus fixed_bytes (the KIVI residual window of kivi2 and q4, the
  // transfer slots).
  size_t n_bytes() const { return blocks_bytes_ + geometry_.fixed_bytes(n_blocks_); }
  // kivi2, q4: residual slots stolen / not available so far (summed over layers).
  uint64_t kivi_steals() const;

  // Of a prefix-cache hit on blocks[0, n): the longest n' <= n a new sequence
  // can start after and read exactly what recomputing would give: kivi2/q4
  // with an fp16 window need the last window blocks' fp16 rows still held in
  // every layer (kv_quant_kivi.h); n for the other formats.
  int32_t usable_prefix(std::span<const int32_t> blocks) const;
  // Whether a new sequence starting right after `blocks` (the last blocks of
  // a hit in one layer group, the last residual_blocks() of them read in
  // fp16) reads them as recomputing would: each holds its rows in the first
  // n_tensors tensors (the group's layers; a padded group uses fewer).
  bool holds_window_rows(std::span<const int32_t> blocks, int n_tensors) const;

  // Block `block` is no longer held by any sequence: its residual slots
  // (q4/kivi2) stop being pinned; a sealed block's fp16 window rows are
  // retained for a later prefix-cache hit, an open block's slot is freed.
  void release_residual(int64_t block);
  // Whether some layer's residual slot of `block` is pinned (kv_quant_kivi.h).
  bool residual_pinned(int64_t block) const;
  // f(block) for each (layer, block) whose residual slot is pinned.
  template <class F>
  void for_each_pinned_block(F&& f) const {
    for (const auto& r : kivi_) r->for_each_pinned_block(f);
  }
  // KiviResidual::check_integrity of every layer.
  void check_residual_integrity() const;

  // The K/V pools of model layer il (its tensor), as the attention kernels
  // take them.
  PagedKvLayer layer(int il) const { return tensor(groups_.tensor_of(il)); }
  // The K/V pools of tensor t (t < geometry().n_layers).
  PagedKvLayer tensor(int t) const;

  // Copies every layer's slots of block `src` into block `dst` (copy-on-write).
  void copy_block(int64_t src, int64_t dst);

  // The blocks' memory as one region, for moving blocks between workers
  // (disaggregated prefill/decode, kv_transfer/): block b of layer l holds
  // its K bytes at region + k_offset(l) + b * k_block_bytes() and its V bytes
  // at region + v_offset(l) + b * v_block_bytes(). kivi2's residual slots are
  // not in it; its transfer slots are, after the blocks.
  void* region() const { return mem_; }
  size_t region_bytes() const { return n_bytes_; }
  // Bytes of the region the OS holds in memory (mincore): the pages ever
  // written, as the pool's pages are never given back. Thread-safe (a system
  // call on a mapping that lives as long as this object); O(pages).
  size_t resident_bytes() const;
  size_t k_offset(int il) const { return size_t(il) * (k_pool_bytes() + v_pool_bytes()); }
  size_t v_offset(int il) const { return k_offset(il) + k_pool_bytes(); }
  size_t k_block_bytes() const { return k_pool_bytes() / size_t(n_blocks_); }
  size_t v_block_bytes() const { return v_pool_bytes() / size_t(n_blocks_); }

  // Transfer slots (W > 0 only; engine thread). A slot holds, for each of W
  // blocks i (in the order given) and each layer l, the fp16 K rows then the
  // fp16 V rows of the block's residual slot, each [n_kv_heads, block_size,
  // head_dim] (kivi2's values rotated, as the slots keep them):
  //   rows (i, l, is_v) at ((i * n_layers + l) * 2 + is_v) * n_kv_heads * block_size * head_dim * 2
  // A free slot's id, or -1 when all are taken (or W == 0).
  int32_t claim_transfer_slot();
  // REQUIRES: slot claimed and not yet released.
  void release_transfer_slot(int32_t slot);
  // The slot's offset within region(). REQUIRES: 0 <= slot < kKvTransferSlots, W > 0.
  size_t transfer_slot_offset(int32_t slot) const;
  size_t transfer_slot_bytes() const { return geometry_.transfer_slot_bytes(); }
  // Copies the window rows of `blocks` (W of them) into the slot. False,
  // with the slot's contents meaningless, unless every layer holds_rows of
  // every block. REQUIRES: blocks.size() == W, slot claimed.
  bool export_window_rows(std::span<const int32_t> blocks, int32_t slot) const;
  // The blocks' units were just filled from another worker's export of
  // these rows: gives each block, in every layer, a retained residual slot
  // holding the slot's rows (as a sealed block left behind keeps them), so
  // that a prefix-cache hit ending after blocks.back() is usable. A block
  // whose residual slot is pinned (a running sequence reads it: a local hit,
  // the same rows) keeps it; a retained or stale one is overwritten. Never
  // steals a pinned slot; false if some layer had no spare slot (then the
  // hit is cut back at admission). REQUIRES: blocks.size() == W, slot claimed.
  bool import_window_rows(std::span<const int32_t> blocks, int32_t slot);

 private:
  KvStorage(const KvGeometry& g, KvLayerGroups groups, int64_t n_blocks, void* mem,
            size_t blocks_bytes, size_t n_bytes);
  size_t k_pool_bytes() const;  // bytes of one layer's K pool
  size_t v_pool_bytes() const;  // bytes of one layer's V pool

  const KvGeometry geometry_;
  const KvLayerGroups groups_;
  const int64_t n_blocks_;
  void* const mem_;
  const size_t blocks_bytes_;                        // the blocks, at the start of mem_
  const size_t n_bytes_;                             // of mem_: the blocks, then the transfer slots
  std::vector<uint8_t> transfer_used_;               // [kKvTransferSlots] when W > 0
  std::unique_ptr<KiviStaging> kivi_staging_;        // kivi2, q4 only
  std::vector<std::unique_ptr<KiviResidual>> kivi_;  // kivi2, q4 only: per layer
};

}  // namespace omnibus
