// PrefixCache: which full KV blocks hold which token prefix (automatic prefix
// caching, vLLM v1 / nano-vllm style hash chain).
//
// A full block's identity covers every token before it: its key is
//   key(i) = xxh3_64(tokens of block i, seed = key(i - 1)),  key(-1) = t.root.
// t.root is kRootKey, or root_key(cache_salt) for a request with a salt: a
// tenant's blocks then have keys no other salt produces, and block 0 is found
// only by a sequence with the same root (checked, not only hashed), so
// tenants with different salts never share a block (docs/security.md).
// The key only *finds* a candidate; a hit is accepted only when the candidate
// holds exactly the same block_size tokens AND was registered as the successor
// of the very block (id and generation) matched for position i - 1. By
// induction a matched run is exactly the requested prefix, so a hash collision
// (even a forced one: set_key_mask_for_testing) can cost a miss but never
// returns a wrong block.
//
//   tokens:  |  t0..t3  |  t4..t7  |  t8..t11 | t12 t13 _ _ |
//   keys:       k0  ->     k1   ->    k2          (partial: no key)
//   map:     k0 -> b7,  k1 -> b2,  k2 -> b9       b7 <- b2 <- b9 (parent links)
//
// Blocks are not owned here: BlockPool owns them; a registered block may be
// held by sequences (ref > 0) or sit in the free list (ref 0) where it stays
// cached until the pool hands it out again, which calls evict() (drops the
// entry, bumps the block's generation so successors registered after it no
// longer verify).
//
// Invariants (check_integrity): every map entry (k -> b) has b registered
// with key k; the number of registered blocks equals the map size; a
// registered block's parent is another block or the root.
//
// Events: with a KvEventRecorder attached, every change of the key set is
// recorded (a new registration: stored; unregister: removed; clear: all
// cleared), so that a subscriber replaying them holds exactly the keys of map_.
//
// Thread-safety: none; the engine thread owns it (through KvCacheManager).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/kv_events.h"

namespace omnibus {

// A sequence's tokens as two spans (prompt, then output), without copying,
// and the seed of its hash chain (PrefixCache::kRootKey, or a salt's).
struct TokenView {
  std::span<const int32_t> head;
  std::span<const int32_t> tail;
  uint64_t root = 0x6f6d6e6962757321ull;  // PrefixCache::kRootKey

  int32_t size() const { return int32_t(head.size() + tail.size()); }
  int32_t operator[](int32_t i) const {
    return size_t(i) < head.size() ? head[size_t(i)] : tail[size_t(i) - head.size()];
  }
};

class PrefixCache {
 public:
  static constexpr uint64_t kRootKey = 0x6f6d6e6962757321ull;  // the seed of block 0
  // The seed of block 0 for requests with this cache_salt: kRootKey for "",
  // else a key no other salt (and not kRootKey) gives, but by a hash collision.
  static uint64_t root_key(std::string_view cache_salt);

  // A block at a point of its life: a successor is valid only while its
  // parent still has the generation recorded at registration.
  struct BlockRef {
    int32_t block = -1;  // -1: the root (before block 0)
    uint32_t generation = 0;
  };

  // REQUIRES: n_blocks >= 1, block_size >= 1.
  PrefixCache(int32_t n_blocks, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t n_cached() const { return int32_t(map_.size()); }
  bool is_cached(int32_t block) const { return meta_[size_t(block)].cached; }
  BlockRef ref_of(int32_t block) const { return BlockRef{block, meta_[size_t(block)].generation}; }

  // Appends to `keys` the keys of t's full blocks up to n_blocks in total
  // (keys already present are kept: they depend on the tokens only).
  // REQUIRES: n_blocks * block_size <= t.size().
  void extend_keys(const TokenView& t, int32_t n_blocks, std::vector<uint64_t>& keys) const;
  // The key of one block of `block_size` tokens after the block keyed `parent`
  // (kRootKey for block 0), unmasked: what extend_keys computes, for callers
  // outside the engine (a decode worker checking kv_transfer_params).
  static uint64_t chain_key(std::span<const int32_t> block_tokens, uint64_t parent);
  // The keys of the first n_blocks full blocks of `tokens` from `root`
  // (root_key of the cache salt): a prompt's chain, as a prefill worker
  // offers it and a decode worker checks it. REQUIRES: n_blocks * block_size
  // <= tokens.size().
  static std::vector<uint64_t> chain_keys(std::span<const int32_t> tokens, int32_t n_blocks,
                                          int32_t block_size, uint64_t root);

  // The registered block holding block i of t (key `key`) as the successor of
  // `parent` (the block matched for i - 1, or the root), or -1.
  int32_t find(uint64_t key, const TokenView& t, int32_t i, BlockRef parent) const;

  // Registers `block`, whose K/V hold block i of t computed after `parent`.
  // Returns the canonical block for this content: `block` itself, or an
  // already registered block with the same content and parent (a duplicate;
  // `block` stays unregistered). Returns -1 when nothing can be registered
  // (the parent is no longer valid, or the key belongs to a valid entry with
  // other content: a collision); callers stop caching that sequence there.
  // REQUIRES: !is_cached(block).
  int32_t insert(int32_t block, uint64_t key, const TokenView& t, int32_t i, BlockRef parent);

  // The pool reuses `block` for new content: drops its entry, if any (and,
  // with an eviction sink set, records it there first).
  void evict(int32_t block);

  // A registered block the pool is about to reuse, as it was registered: what
  // the disk tier writes before the block's slots are overwritten.
  struct Evicted {
    int32_t block = -1;
    uint64_t key = 0;
    uint64_t parent_key = 0;      // kRootKey for block 0
    std::vector<int32_t> tokens;  // [block_size]
  };
  // From now on evict() appends every registered block it drops to `sink`
  // (nullptr: stop). The sink must outlive the cache or be detached first.
  void set_eviction_sink(std::vector<Evicted>* sink) { evicted_ = sink; }

  // Drops every entry (a cache flush). Generations are bumped, so nothing
  // registered before can be a valid parent again. Blocks held by sequences
  // stay theirs; they are just no longer findable. Records one
  // KvAllBlocksCleared (when anything was cached), not a removal per block.
  void clear();

  // The keys of the registered blocks, in no particular order.
  std::vector<uint64_t> keys() const;

  // Records every change of the key set into `recorder` from now on (nullptr:
  // stop). The recorder must outlive the cache or be detached first.
  void set_event_recorder(KvEventRecorder* recorder) { events_ = recorder; }

  // Test hook: keys are AND-ed with `mask` (0 makes every block collide).
  void set_key_mask_for_testing(uint64_t mask) { key_mask_ = mask; }

  // Aborts when an invariant in the header comment is violated.
  void check_integrity() const;

 private:
  struct Meta {
    bool cached = false;
    uint32_t generation = 0;  // bumped each time the pool reuses the block
    uint64_t key = 0;
    uint64_t parent_key = 0;  // the parent's key at registration (the root for block 0)
    BlockRef parent;
  };
  bool is_valid(BlockRef r) const {
    return r.block < 0 ||
           (meta_[size_t(r.block)].cached && meta_[size_t(r.block)].generation == r.generation);
  }
  bool same_tokens(int32_t block, const TokenView& t, int32_t i) const;
  void unregister(int32_t block);

  // Constant after construction.
  const int32_t block_size_;

  uint64_t key_mask_ = ~uint64_t(0);
  std::vector<Meta> meta_;       // [n_blocks]
  std::vector<int32_t> tokens_;  // [n_blocks * block_size]: a registered block's tokens
  std::unordered_map<uint64_t, int32_t> map_;  // key -> registered block
  KvEventRecorder* events_ = nullptr;          // not owned; nullptr: no events
  std::vector<Evicted>* evicted_ = nullptr;    // not owned; nullptr: not recorded
};

}  // namespace omnibus
