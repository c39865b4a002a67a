// BlockPool: the accounting side of the paged KV cache. A fixed number of
// blocks, created once (KvStorage holds their memory; this class holds only
// who uses which block). Every block has a reference count: the number of
// block tables that hold it. A block with no references sits in the free
// list; allocate() takes from the front. release() puts a block that holds
// something worth keeping (a prefix-cache entry) at the back, so those are
// evicted in LRU order (least recently freed first), and any other block at
// the front, so it is reused next. The pool starts as untouched blocks in id
// order; blocks holding nothing are reused most-recent-first, before an
// untouched block, so the pool's resident memory follows the working set
// (plus the prefix cache) rather than cycling through every page.
//
// The free list is intrusive and doubly linked (prev/next indices stored in
// the block itself): O(1) pop from the front, push to the back and removal
// from the middle. That last operation is the seam for prefix caching
// (vLLM v1 style, see PrefixCache): a freed full block keeps its prefix key
// and stays in the free list as a cache entry; a later request with the same
// prefix takes it back out of the middle (take_free(id)), and the manager
// evicts the entry of whatever cached block allocate() pops from the front.
//
//   invariant: n_free() + #{blocks with ref_count > 0} == n_blocks(),
//              a block is in the free list  <=>  ref_count == 0.
//
// Thread-safety: none; the engine thread owns the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace omnibus {

class BlockPool {
 public:
  // REQUIRES: n_blocks >= 1. All blocks start free, in id order.
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return int32_t(blocks_.size()); }
  int32_t n_free() const { return n_free_; }
  int32_t n_used() const { return n_blocks() - n_free_; }

  // Takes the least recently freed block; its ref count becomes 1.
  // REQUIRES: n_free() > 0.
  int32_t allocate();
  // Takes a specific free block out of the free list (ref count 0 -> 1); the
  // prefix cache's "hit on a freed block". REQUIRES: ref_count(id) == 0.
  void take_free(int32_t id);
  // One more table holds `id`. REQUIRES: ref_count(id) > 0.
  void ref(int32_t id);
  // One table fewer holds `id`; at zero the block goes to the back of the free
  // list when `keep` (a cache entry: evicted last, LRU), else to the front
  // (reused next). REQUIRES: ref_count(id) > 0.
  void release(int32_t id, bool keep = true);

  int32_t ref_count(int32_t id) const { return blocks_[size_t(id)].ref_count; }

  // Walks the free list: it is well linked, holds exactly the blocks with
  // ref count 0, and their number is n_free(). Aborts on violation.
  void check_integrity() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    int32_t prev = -1;  // free-list neighbours (kNil when at an end / not free)
    int32_t next = -1;
  };
  static constexpr int32_t kNil = -1;

  void push_back(int32_t id);
  void push_front(int32_t id);
  void unlink(int32_t id);

  std::vector<Block> blocks_;
  int32_t head_ = kNil;  // least recently freed
  int32_t tail_ = kNil;  // most recently freed
  int32_t n_free_ = 0;
};

}  // namespace omnibus
