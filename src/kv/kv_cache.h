// KvCache: the engine's KV cache as one object. It owns the KvStorage (every
// layer's K/V pools and, for q4/kivi2, the fp16 residual slots,
// kv/kv_quant_kivi.h) and the KvCacheManager (block tables, ref counts,
// copy-on-write, prefix cache), and keeps the two in step itself: a prefix
// hit is cut back to where the residual still holds the fp16 window it needs,
// and a block no table holds any more lets go of its residual slots. Nothing
// is wired from outside.
//
// The scheduler's contract (engine/scheduler.h) is seven calls, after vLLM
// v1's KVCacheManager:
//   match_prefix    the cached (computed) blocks a new sequence can start after
//   allocate_new    a table for a new sequence: the match plus n new slots
//   allocate_slots  n more slots for a running sequence (false: preempt)
//   free            a finished or preempted sequence's blocks
//   commit          after a step: register the blocks that became full into
//                   the prefix cache (Scheduler::update_from_output)
//   slide           after a step: sliding-window groups let go of what left
//                   every window
//   truncate        after verifying a draft: the rejected tokens' slots go
//                   (speculative decoding, engine/speculation.h)
// The engine adds, per step: copy_blocks (the plan's copy-on-write),
// block_table (the model batch) and fork (parallel sampling, n > 1).
//
// Layer groups (kv/kv_layer_groups.h, sliding-window KV): every call covers
// all groups; block_table(seq, g) is group g's table.
//
//   a sequence:   [ cached (matched) | computed | this step's slots | ... ]
//                   match_prefix       commit      allocate_*
//
// Invariants (check_integrity): the manager's (ref counts, tables, prefix
// cache); every layer's residual slots are free or owned by the one block
// whose slot they are; a block no table holds has no pinned slot.
//
// Thread-safety: none; the engine thread owns it. The model reads and writes
// the storage during forward() on that thread's behalf.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "util/status.h"

namespace omnibus {

class KvCache {
 public:
  // groups: see KvStorage::create (none given: uniform).
  // REQUIRES: n_blocks >= 1 (see plan_kv_cache, kv/kv_cache_size.h).
  static StatusOr<std::unique_ptr<KvCache>> create(const KvGeometry& g, int64_t n_blocks,
                                                   bool enable_prefix_caching,
                                                   KvLayerGroups groups = {});

  // --- the scheduler's calls ---
  // The longest cached run of t's full blocks, at most max_blocks, that a new
  // sequence can start after (for kivi2 with a window: whose last
  // residual_blocks() blocks' fp16 rows are still held). `keys` memoizes t's
  // block keys (kept with its tokens). Empty when caching is off.
  // need_window = false: any cached run, rows or not (an import that brings
  // the window rows of where its hit will end, KvStorage::import_window_rows).
  void match_prefix(const TokenView& t, int32_t max_blocks, std::vector<uint64_t>& keys,
                    PrefixMatch& out, bool need_window = true) const;
  // A new sequence whose table is `m` (fresh from match_prefix) plus n_new
  // slots, or -1, changing nothing, if that would leave fewer than `keep_free`
  // free blocks. A copy-on-write is appended to `copies`.
  int32_t allocate_new(const PrefixMatch& m, int32_t n_new, int32_t keep_free,
                       std::vector<BlockCopy>& copies);
  // n_new more slots for a live sequence; false, changing nothing, when the
  // pool is short (the scheduler then preempts).
  bool allocate_slots(int32_t seq, int32_t n_new, std::vector<BlockCopy>& copies) {
    return manager_.allocate_slots(seq, n_new, copies);
  }
  // Releases the sequence's blocks and id; blocks no table holds any more
  // unpin their residual slots (a sealed block's window rows are retained
  // for a later hit). REQUIRES: a live id.
  void free(int32_t seq);

  // --- the engine's calls ---
  // Applies a step's copy-on-write pairs (before the forward pass).
  void copy_blocks(std::span<const BlockCopy> copies);
  // Speculative decoding's roll-back: `seq` keeps its first n_tokens slots
  // (KvCacheManager::truncate). A format with residual slots (q4, kivi2)
  // REQUIRES that the dropped slots lie in the sequence's last block and
  // leave its last two slots unwritten (max_draft_in_block): that block's
  // group is still open, its dropped rows are only fp16 rows of its slot that
  // the next writes replace, and no residual window moved for them.
  void truncate(int32_t seq, int32_t n_tokens);
  // The most draft tokens a decode at position pos may add so that truncate
  // can take them back: any for formats without residual slots, else those
  // that keep the step inside pos's block short of its last two slots (the
  // last seals the group; the one before moves a query's residual window).
  int32_t max_draft_in_block(int32_t pos) const {
    if (!has_residual_) return INT32_MAX;
    return std::max(0, block_size() - 3 - pos % block_size());
  }
  // A new sequence sharing every block of `parent`.
  int32_t fork(int32_t parent) { return manager_.fork(parent); }
  // A new sequence holding the first n_blocks full blocks of `seq` (a prompt
  // pinned for a remote decode worker; KvCacheManager::share_prefix).
  int32_t share_prefix(int32_t seq, int32_t n_blocks) {
    return manager_.share_prefix(seq, n_blocks);
  }
  // The first n_computed tokens of t have their K/V written: the table's
  // blocks that are full within them join the prefix cache.
  void commit(int32_t seq, const TokenView& t, int32_t n_computed, std::vector<uint64_t>& keys) {
    manager_.cache_full_blocks(seq, t, n_computed, keys);
  }
  // After commit: the sliding groups let go of the blocks no token from
  // n_computed on can see (KvCacheManager::slide). No-op with one group.
  void slide(int32_t seq, int32_t n_computed);
  // Group 0's table (the only one without sliding-window KV).
  std::span<const int32_t> block_table(int32_t seq) const { return manager_.block_table(seq); }
  std::span<const int32_t> block_table(int32_t seq, int32_t group) const {
    return manager_.block_table(seq, group);
  }
  int32_t n_groups() const { return manager_.n_groups(); }
  // Slots `seq` can grow by with `spare` free blocks (KvCacheManager::max_new_slots).
  int32_t max_new_slots(int32_t seq, int32_t spare) const {
    return manager_.max_new_slots(seq, spare);
  }
  KvStorage& storage() { return *storage_; }

  // --- queries ---
  int32_t block_size() const { return manager_.block_size(); }
  int32_t n_blocks() const { return manager_.n_blocks(); }
  int32_t n_free_blocks() const { return manager_.n_free_blocks(); }
  int32_t n_used_blocks() const { return manager_.n_used_blocks(); }
  int32_t n_cached_blocks() const { return manager_.n_cached_blocks(); }
  int32_t n_seqs() const { return manager_.n_seqs(); }
  int32_t n_tokens(int32_t seq) const { return manager_.n_tokens(seq); }
  bool prefix_caching() const { return manager_.prefix_caching(); }
  void extend_keys(const TokenView& t, int32_t n_blocks, std::vector<uint64_t>& keys) const {
    manager_.extend_keys(t, n_blocks, keys);
  }
  double n_unfilled_slots() const { return manager_.n_unfilled_slots(); }
  uint64_t n_residual_steals() const { return storage_->kivi_steals(); }
  size_t n_bytes() const { return storage_->n_bytes(); }
  // Thread-safe: KvStorage::resident_bytes.
  size_t resident_bytes() const { return storage_->resident_bytes(); }
  // Drops the prefix cache (a flush); sequences keep their blocks.
  void clear_prefix_cache() { manager_.clear_prefix_cache(); }
  // The keys (hash chain values) of the blocks in the prefix cache.
  std::vector<uint64_t> cached_block_keys() const { return manager_.cached_block_keys(); }
  // See PrefixCache::set_event_recorder.
  void set_event_recorder(KvEventRecorder* recorder) { manager_.set_event_recorder(recorder); }
  // See PrefixCache::set_eviction_sink: the blocks allocation takes back out
  // of the cache, recorded before anything writes into them.
  void set_eviction_sink(std::vector<PrefixCache::Evicted>* sink) {
    manager_.set_eviction_sink(sink);
  }
  // Test hook: see PrefixCache::set_key_mask_for_testing.
  void set_key_mask_for_testing(uint64_t mask) { manager_.set_key_mask_for_testing(mask); }

  // Aborts when an invariant in the header comment is violated.
  void check_integrity() const;

 private:
  KvCache(std::unique_ptr<KvStorage> storage, bool enable_prefix_caching);
  void release_residuals();  // of the blocks in freed_

  std::unique_ptr<KvStorage> storage_;
  KvCacheManager manager_;
  const bool has_residual_;
  const int residual_blocks_;
  std::vector<int32_t> freed_;  // scratch of free(): keeps its capacity
};

}  // namespace omnibus
