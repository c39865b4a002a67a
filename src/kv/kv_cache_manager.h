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
//   a table of n_tokens slots has exactly ceil(n_tokens / block_size) blocks;
//   a table's cached blocks are full: n_cached_blocks * block_size <= n_tokens;
//   PrefixCache::check_integrity (map <-> registered blocks).
//
// Prefix caching (when enabled; see PrefixCache and docs/prefix-caching.md):
// a new sequence asks match_prefix() for the longest cached run of full
// blocks of its tokens, attaches them (attach_prefix: ref + 1, or taken back
// out of the free list) and computes only the rest. After each step the
// engine registers the blocks that became full (cache_full_blocks). Freed
// blocks keep their registration and double as the cache: the free list is
// in LRU order and a block leaves the cache only when allocation reuses it.
//
//   a sequence's table:  [ b7 | b2 | b9 | b4 ]    n_tokens 14, block size 4
//                          ^^^^^^^^^^^^^           n_cached_blocks = 3 (registered
//                                                  or verified duplicates)
//
// The engine reaches it through KvCache (kv/kv_cache.h), which adds the
// storage and the q4/kivi2 residual slots; allocation failure is what
// triggers preemption.
//
// Layer groups (kv/kv_layer_groups.h): with sliding-window KV a sequence has
// one table per group over the same pool, all covering the same n_tokens
// slots. Group 0 attends to everything (the table block_table(seq) returns).
// A sliding group of window w lets go, at slide(), of every block wholly
// before position n - w + 1 (n: tokens computed; the next token's window is
// (n - w, n]); its table keeps kNoBlock there:
//
//   window 8, block size 4, n_tokens 14:
//     group 0:   [ b7 | b2 | b9 | b4 ]
//     group 1:   [  - | b5 | b6 | b8 ]     positions 7..13 still visible
//
// Prefix caching across groups (vLLM's hybrid manager rules): group 0 keeps
// the hash-chain cache; a sliding group's full block is registered under the
// group-0 block of the same position (its anchor: id and generation), which
// the chain has verified, so a sliding hit is exact whenever its anchor is.
// A hit of L blocks needs group 0's blocks [0, L) and, in every sliding
// group, the blocks covering positions L * bs - w + 1 .. L * bs - 1 (what the
// next token reads); match_prefix returns the longest L that has them.
// Blocks let go by a sliding group stay in the free list as cache entries,
// like a finished sequence's.
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace omnibus {

struct BlockCopy {
  int32_t src;
  int32_t dst;
};

// A table slot a sliding group has let go of (outside every token's window).
inline constexpr int32_t kNoBlock = -1;

// The longest cached run of full blocks of some tokens (match_prefix).
struct PrefixMatch {
  std::vector<int32_t> blocks;  // group 0's block ids for blocks 0 .. size() - 1
  // Sliding groups 1 .. n_groups - 1: blocks [window_first, size()) of each,
  // group after group (empty with one group).
  std::vector<int32_t> window;
  int32_t window_first = 0;
  int32_t n_free = 0;  // of all of them, blocks in the free list (ref count 0)

  int32_t n_blocks() const { return int32_t(blocks.size()); }
  void clear() {
    blocks.clear();
    window.clear();
    window_first = 0;
    n_free = 0;
  }
};

class KvCacheManager {
 public:
  // n_groups layer groups: group 0 attends to everything, groups 1 ..
  // n_groups - 1 see the last `window` tokens (KvLayerGroups::hybrid gives
  // every sliding group the model's one window). One group is the layout
  // without sliding-window KV.
  // REQUIRES: n_blocks >= 1, block_size >= 1, 1 <= n_groups < 128, and
  // window >= 1 when n_groups > 1.
  KvCacheManager(int32_t n_blocks, int32_t block_size, bool enable_prefix_caching = false,
                 int32_t n_groups = 1, int32_t window = 0);

  int32_t n_groups() const { return n_groups_; }

  int32_t block_size() const { return block_size_; }
  int32_t n_blocks() const { return pool_.n_blocks(); }
  int32_t n_free_blocks() const { return pool_.n_free(); }
  int32_t n_used_blocks() const { return pool_.n_used(); }
  int32_t n_seqs() const { return n_live_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Registered blocks (held by tables or free), i.e. the prefix cache's size.
  int32_t n_cached_blocks() const { return cache_.n_cached(); }

  // A new sequence with an empty table. Reuses the storage of removed ones,
  // so a warm manager does not allocate.
  int32_t add_seq();
  // Releases the sequence's blocks and its id; the blocks no table holds
  // any more (now in the free list, cached or not) are appended to `freed`
  // when given (KvCache lets go of their residual slots). REQUIRES: a live id.
  void free(int32_t seq, std::vector<int32_t>* freed = nullptr);
  // Shrinks a live sequence to its first n_tokens slots (speculative decoding
  // drops the slots of rejected draft tokens); the blocks wholly past them
  // are released, and appended to `freed` when given. REQUIRES: n_tokens <=
  // n_tokens(seq), its registered blocks and slid-out blocks all before
  // n_tokens (only slots added since the last commit are dropped).
  void truncate(int32_t seq, int32_t n_tokens, std::vector<int32_t>* freed = nullptr);
  // A new sequence sharing every block of `parent` (ref counts + 1).
  int32_t fork(int32_t parent);
  // A new sequence holding (ref count + 1) the first n_blocks full blocks of
  // `seq`'s table and nothing else; it never registers blocks in the prefix
  // cache. Pins a finished prompt's blocks for a remote decode worker.
  // REQUIRES: a live seq, n_blocks * block_size <= n_tokens(seq), one group.
  int32_t share_prefix(int32_t seq, int32_t n_blocks);
  // The sequence has computed its first n_computed tokens: each sliding group
  // lets go of its blocks wholly before n_computed - w + 1 (appended to
  // `freed`, when given, if no table holds them any more). No-op with one
  // group. REQUIRES: a live seq, n_computed <= n_tokens(seq).
  void slide(int32_t seq, int32_t n_computed, std::vector<int32_t>* freed = nullptr);

  // The longest run of t's full blocks that is cached, at most max_blocks
  // long, into `out`. `keys` memoizes t's block keys (kept by the caller
  // with its tokens; extended here as needed). Empty when caching is off.
  void match_prefix(const TokenView& t, int32_t max_blocks, std::vector<uint64_t>& keys,
                    PrefixMatch& out) const;
  // Cuts a match back to its first n blocks (KvCache: kivi2's fp16 window
  // must still be held where a hit ends; the disk tier's and transfers'
  // reads). REQUIRES: 0 <= n <= m.n_blocks(), one group.
  void truncate_match(PrefixMatch& m, int32_t n) const;
  // Extends `keys` to the keys of t's first n_blocks full blocks (no-op when
  // caching is off). REQUIRES: n_blocks * block_size <= t.size().
  void extend_keys(const TokenView& t, int32_t n_blocks, std::vector<uint64_t>& keys) const {
    if (prefix_caching_) cache_.extend_keys(t, n_blocks, keys);
  }
  // Free blocks that attaching `m` and then appending n_new slots would take
  // (in every group).
  int32_t num_blocks_needed(const PrefixMatch& m, int32_t n_new) const {
    return n_groups() * (blocks_for(m.n_blocks() * block_size_ + n_new) - m.n_blocks()) + m.n_free;
  }
  // Makes the matched blocks the start of an empty table: it then covers
  // m.n_blocks() * block_size slots. REQUIRES: n_tokens(seq) == 0, `m` fresh
  // from match_prefix with no pool change since.
  void attach_prefix(int32_t seq, const PrefixMatch& m);
  // Registers the table's blocks that are full within the first n_computed
  // tokens of t (their K/V written). No-op when caching is off.
  // REQUIRES: t is the sequence's tokens, n_computed <= n_tokens(seq).
  void cache_full_blocks(int32_t seq, const TokenView& t, int32_t n_computed,
                         std::vector<uint64_t>& keys);
  // Drops the prefix cache (PrefixCache::clear, and the sliding groups'
  // entries); tables keep their blocks.
  void clear_prefix_cache();
  // The keys of the cached blocks (PrefixCache::keys): what KV events publish.
  std::vector<uint64_t> cached_block_keys() const { return cache_.keys(); }
  // See PrefixCache::set_event_recorder.
  void set_event_recorder(KvEventRecorder* recorder) { cache_.set_event_recorder(recorder); }
  // See PrefixCache::set_eviction_sink.
  void set_eviction_sink(std::vector<PrefixCache::Evicted>* sink) {
    cache_.set_eviction_sink(sink);
  }
  // Test hook: see PrefixCache::set_key_mask_for_testing.
  void set_key_mask_for_testing(uint64_t mask) { cache_.set_key_mask_for_testing(mask); }

  // Token slots the table covers (written, or being written this step).
  int32_t n_tokens(int32_t seq) const { return seqs_[size_t(seq)].n_tokens; }
  // Group 0's table.
  std::span<const int32_t> block_table(int32_t seq) const { return seqs_[size_t(seq)].blocks; }
  // Group g's table (kNoBlock where a sliding group let go).
  std::span<const int32_t> block_table(int32_t seq, int32_t group) const {
    return group == 0 ? std::span<const int32_t>(seqs_[size_t(seq)].blocks)
                      : std::span<const int32_t>(seqs_[size_t(seq)].slide[size_t(group - 1)]);
  }
  // Tables holding the block (0: in the free list).
  int32_t ref_count(int32_t block) const { return pool_.ref_count(block); }

  // Free blocks that appending n_new slots would take: new blocks, plus one
  // for copy-on-write when the last block is shared and partly filled (in
  // every group).
  int32_t num_blocks_needed(int32_t seq, int32_t n_new) const;
  bool can_allocate(int32_t seq, int32_t n_new) const {
    return num_blocks_needed(seq, n_new) <= pool_.n_free();
  }
  // Extends the table by n_new slots. Returns false, changing nothing, when
  // the pool is short. A copy-on-write is appended to `copies`.
  bool allocate_slots(int32_t seq, int32_t n_new, std::vector<BlockCopy>& copies);

  // Slots a running sequence can grow by with at most `spare` free blocks
  // (none when the copy-on-write alone would not fit).
  int32_t max_new_slots(int32_t seq, int32_t spare) const;

  // Allocated but unfilled token slots over all tables of all groups (a
  // shared partial last block counted once, split over its holders): the
  // paging waste.
  double n_unfilled_slots() const;

  // Aborts when an invariant in the header comment is violated.
  void check_integrity() const;

 private:
  struct Seq {
    bool live = false;
    int32_t n_tokens = 0;
    std::vector<int32_t> blocks;              // group 0
    std::vector<std::vector<int32_t>> slide;  // [n_groups - 1] sliding groups' tables
    int32_t n_slid = 0;                       // sliding tables hold kNoBlock exactly at [0, n_slid)
    // Prefix caching: blocks [0, n_cached_blocks) are registered (or verified
    // duplicates of registered ones); `last` is the canonical block of the
    // last of them, the parent of the next. stop_caching after a collision.
    int32_t n_cached_blocks = 0;
    PrefixCache::BlockRef last;
    bool stop_caching = false;
  };
  int32_t blocks_for(int32_t n_tokens) const { return (n_tokens + block_size_ - 1) / block_size_; }
  // The last block of `table` is shared with another table and has free slots.
  bool needs_copy_on_write(const Seq& s, const std::vector<int32_t>& table) const;
  int32_t n_copies_on_write(const Seq& s) const;
  // Takes the least recently used free block for `group`, dropping its cache
  // entry (group 0's chain or a sliding group's anchor).
  int32_t take_block(int32_t group);
  // Whether a free block stays a cache entry (back of the LRU list).
  bool is_cache_entry(int32_t block) const;
  // Sliding group `group`'s block registered under group 0's block `anchor`
  // (still valid), or -1.
  int32_t anchored(int32_t group, PrefixCache::BlockRef anchor) const;
  void register_anchored(int32_t group, int32_t block, PrefixCache::BlockRef anchor);
  void drop_anchor(int32_t block);
  // The first block a sliding group keeps when the next token is n.
  int32_t first_kept_block(int32_t n) const {
    return window_ <= 0 || n < window_ ? 0 : (n - window_ + 1) / block_size_;
  }

  const int32_t block_size_;
  const bool prefix_caching_;
  const int32_t n_groups_;
  const int32_t window_;  // of groups 1 .. n_groups - 1 (0 with one group)
  BlockPool pool_;
  PrefixCache cache_;  // group 0's hash chain
  // Sliding groups' cache entries: anchor_[(g - 1) * n_blocks + a] is the
  // block of group g registered under group 0's block a, with a's generation
  // then; anchor_of_[b] is the group-0 block that b is registered under (-1:
  // none). group_of_[b]: the group that last took b from the pool.
  struct Anchor {
    int32_t block = -1;
    uint32_t generation = 0;
  };
  std::vector<Anchor> anchor_;
  std::vector<int32_t> anchor_of_;
  std::vector<int8_t> group_of_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_ids_;
  int32_t n_live_ = 0;
};

}  // namespace omnibus
