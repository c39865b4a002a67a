#include "kv/block_pool.h"

#include "util/check.h"

namespace omnibus {

BlockPool::BlockPool(int32_t n_blocks) {
  OMNIBUS_CHECK(n_blocks >= 1);
  blocks_.resize(size_t(n_blocks));
  for (int32_t id = 0; id < n_blocks; ++id) push_back(id);
}

void BlockPool::push_back(int32_t id) {
  Block& b = blocks_[size_t(id)];
  b.prev = tail_;
  b.next = kNil;
  if (tail_ == kNil) {
    head_ = id;
  } else {
    blocks_[size_t(tail_)].next = id;
  }
  tail_ = id;
  ++n_free_;
}

void BlockPool::push_front(int32_t id) {
  Block& b = blocks_[size_t(id)];
  b.prev = kNil;
  b.next = head_;
  if (head_ == kNil) {
    tail_ = id;
  } else {
    blocks_[size_t(head_)].prev = id;
  }
  head_ = id;
  ++n_free_;
}

void BlockPool::unlink(int32_t id) {
  Block& b = blocks_[size_t(id)];
  if (b.prev == kNil) {
    head_ = b.next;
  } else {
    blocks_[size_t(b.prev)].next = b.next;
  }
  if (b.next == kNil) {
    tail_ = b.prev;
  } else {
    blocks_[size_t(b.next)].prev = b.prev;
  }
  b.prev = b.next = kNil;
  --n_free_;
}

int32_t BlockPool::allocate() {
  OMNIBUS_CHECK(n_free_ > 0);
  const int32_t id = head_;
  unlink(id);
  blocks_[size_t(id)].ref_count = 1;
  return id;
}

void BlockPool::take_free(int32_t id) {
  OMNIBUS_CHECK(id >= 0 && id < n_blocks() && blocks_[size_t(id)].ref_count == 0);
  unlink(id);
  blocks_[size_t(id)].ref_count = 1;
}

void BlockPool::ref(int32_t id) {
  OMNIBUS_CHECK(id >= 0 && id < n_blocks() && blocks_[size_t(id)].ref_count > 0);
  ++blocks_[size_t(id)].ref_count;
}

void BlockPool::release(int32_t id, bool keep) {
  OMNIBUS_CHECK(id >= 0 && id < n_blocks() && blocks_[size_t(id)].ref_count > 0);
  if (--blocks_[size_t(id)].ref_count > 0) return;
  if (keep) {
    push_back(id);
  } else {
    push_front(id);
  }
}

void BlockPool::check_integrity() const {
  int32_t n_listed = 0;
  int32_t prev = kNil;
  for (int32_t id = head_; id != kNil; id = blocks_[size_t(id)].next) {
    OMNIBUS_CHECK(id >= 0 && id < n_blocks());
    OMNIBUS_CHECK(blocks_[size_t(id)].prev == prev);
    OMNIBUS_CHECK(blocks_[size_t(id)].ref_count == 0);
    OMNIBUS_CHECK(++n_listed <= n_blocks());  // no cycle
    prev = id;
  }
  OMNIBUS_CHECK(prev == tail_);
  OMNIBUS_CHECK(n_listed == n_free_);
  int32_t n_unreferenced = 0;
  for (const Block& b : blocks_) {
    OMNIBUS_CHECK(b.ref_count >= 0);
    n_unreferenced += b.ref_count == 0;
  }
  OMNIBUS_CHECK(n_unreferenced == n_free_);
}

}  // namespace omnibus
