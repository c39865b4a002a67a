// KvCacheManager: per-sequence block tables over one BlockPool (PagedAttention).
//
// A sequence here is just a block table plus the number of token slots it
// covers; the engine maps its sequences to ids returned by add_seq(). Blocks
// are shared between tables by reference count: fork() makes a child that
// holds all of its parent's blocks (parallel sampling, n > 1). Writing into
// a shared block would corrupt the other holders, so allocate_slots() first
// copies a shared, partly filled last block (copy-on-write) and reports the
// (src, dst) pair; the caller applies it with KvStorage::copy_block() before
// the step's forward pass. Full shared blocks are never written again, so
// they stay shared.
//
// One sequence's table, block size 4, n_tokens 10:
//   block_table:  [ b7 | b2 | b9 ]
//   slots:         0..3  4..7  8 9 _ _      (_ = allocated, unfilled)
//
// Invariants (check_integrity):
//   free blocks + referenced blocks == pool size;
//   every block's ref count == the number of tables holding it;
//   a table of n_tokens slots has exactly ceil(n_tokens / block_size) blocks.
//
// Like vLLM v1's KVCacheManager, the scheduler sees only can_allocate /
// allocate_slots / free; allocation failure is what triggers preemption.
// (Prefix caching will add get_computed_blocks(tokens) here.)
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"

namespace omnibus {

struct BlockCopy {
  int32_t src;
  int32_t dst;
};

class KvCacheManager {
 public:
  // REQUIRES: n_blocks >= 1, block_size >= 1.
  KvCacheManager(int32_t n_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t n_blocks() const { return pool_.n_blocks(); }
  int32_t n_free_blocks() const { return pool_.n_free(); }
  int32_t n_used_blocks() const { return pool_.n_used(); }
  int32_t n_seqs() const { return n_live_; }

  // A new sequence with an empty table. Reuses the storage of removed ones,
  // so a warm manager does not allocate.
  int32_t add_seq();
  // Releases the sequence's blocks and its id. REQUIRES: a live id.
  void free(int32_t seq);
  // A new sequence sharing every block of `parent` (ref counts + 1).
  int32_t fork(int32_t parent);

  // Token slots the table covers (written, or being written this step).
  int32_t n_tokens(int32_t seq) const { return seqs_[size_t(seq)].n_tokens; }
  std::span<const int32_t> block_table(int32_t seq) const { return seqs_[size_t(seq)].blocks; }

  // Free blocks that appending n_new slots would take: new blocks, plus one
  // for copy-on-write when the last block is shared and partly filled.
  int32_t num_blocks_needed(int32_t seq, int32_t n_new) const;
  bool can_allocate(int32_t seq, int32_t n_new) const {
    return num_blocks_needed(seq, n_new) <= pool_.n_free();
  }
  // Extends the table by n_new slots. Returns false, changing nothing, when
  // the pool is short. A copy-on-write is appended to `copies`.
  bool allocate_slots(int32_t seq, int32_t n_new, std::vector<BlockCopy>& copies);

  // Allocated but unfilled token slots over all tables (a shared partial last
  // block counted once, split over its holders): the paging waste.
  double n_unfilled_slots() const;

  // Aborts when an invariant in the header comment is violated.
  void check_integrity() const;

 private:
  struct Seq {
    bool live = false;
    int32_t n_tokens = 0;
    std::vector<int32_t> blocks;
  };
  int32_t blocks_for(int32_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  // The last block is shared with another table and has free slots.
  bool needs_copy_on_write(const Seq& s) const;

  const int32_t block_size_;
  BlockPool pool_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_ids_;
  int32_t n_live_ = 0;
};

}  // namespace omnibus
