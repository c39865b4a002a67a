#include "kv/kv_cache_manager.h"

#include "util/check.h"

namespace omnibus {

KvCacheManager::KvCacheManager(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), pool_(n_blocks) {
  OMNIBUS_CHECK(block_size >= 1);
}

int32_t KvCacheManager::add_seq() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = int32_t(seqs_.size());
    seqs_.emplace_back();
  }
  Seq& s = seqs_[size_t(id)];
  OMNIBUS_CHECK(!s.live && s.blocks.empty());
  s.live = true;
  s.n_tokens = 0;
  ++n_live_;
  return id;
}

void KvCacheManager::free(int32_t seq) {
  OMNIBUS_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live);
  Seq& s = seqs_[size_t(seq)];
  // Release last block first, so that the free list's LRU order evicts a
  // sequence's tail before its (more shareable) head once prefixes are cached.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  s.blocks.clear();  // keeps capacity
  s.n_tokens = 0;
  s.live = false;
  free_ids_.push_back(seq);
  --n_live_;
}

int32_t KvCacheManager::fork(int32_t parent) {
  OMNIBUS_CHECK(parent >= 0 && size_t(parent) < seqs_.size() && seqs_[size_t(parent)].live);
  const int32_t child = add_seq();  // may reallocate seqs_: index after
  const Seq& p = seqs_[size_t(parent)];
  Seq& c = seqs_[size_t(child)];
  c.blocks.assign(p.blocks.begin(), p.blocks.end());
  c.n_tokens = p.n_tokens;
  for (int32_t b : c.blocks) pool_.ref(b);
  return child;
}

bool KvCacheManager::needs_copy_on_write(const Seq& s) const {
  return s.n_tokens % block_size_ != 0 && pool_.ref_count(s.blocks.back()) > 1;
}

int32_t KvCacheManager::num_blocks_needed(int32_t seq, int32_t n_new) const {
  const Seq& s = seqs_[size_t(seq)];
  OMNIBUS_DCHECK(s.live && n_new >= 0);
  if (n_new == 0) return 0;
  return blocks_for(s.n_tokens + n_new) - int32_t(s.blocks.size()) + (needs_copy_on_write(s) ? 1 : 0);
}

bool KvCacheManager::allocate_slots(int32_t seq, int32_t n_new, std::vector<BlockCopy>& copies) {
  if (n_new == 0) return true;
  if (!can_allocate(seq, n_new)) return false;
  Seq& s = seqs_[size_t(seq)];
  if (needs_copy_on_write(s)) {
    const int32_t src = s.blocks.back();
    const int32_t dst = pool_.allocate();
    pool_.release(src);  // still held by the other table(s)
    s.blocks.back() = dst;
    copies.push_back(BlockCopy{src, dst});
  }
  const int32_t n_blocks = blocks_for(s.n_tokens + n_new);
  while (int32_t(s.blocks.size()) < n_blocks) s.blocks.push_back(pool_.allocate());
  s.n_tokens += n_new;
  return true;
}

double KvCacheManager::n_unfilled_slots() const {
  double n = 0;
  for (const Seq& s : seqs_) {
    if (!s.live || s.blocks.empty()) continue;
    const int32_t unfilled = int32_t(s.blocks.size()) * block_size_ - s.n_tokens;
    n += double(unfilled) / double(pool_.ref_count(s.blocks.back()));
  }
  return n;
}

void KvCacheManager::check_integrity() const {
  pool_.check_integrity();
  std::vector<int32_t> holders(size_t(pool_.n_blocks()), 0);
  int32_t n_live = 0;
  for (const Seq& s : seqs_) {
    if (!s.live) {
      OMNIBUS_CHECK(s.blocks.empty());
      continue;
    }
    ++n_live;
    OMNIBUS_CHECK(int32_t(s.blocks.size()) == blocks_for(s.n_tokens));
    for (int32_t b : s.blocks) {
      OMNIBUS_CHECK(b >= 0 && b < pool_.n_blocks());
      ++holders[size_t(b)];
    }
  }
  OMNIBUS_CHECK(n_live == n_live_);
  int32_t n_referenced = 0;
  for (int32_t b = 0; b < pool_.n_blocks(); ++b) {
    OMNIBUS_CHECK(pool_.ref_count(b) == holders[size_t(b)]);
    n_referenced += holders[size_t(b)] > 0;
  }
  OMNIBUS_CHECK(pool_.n_free() + n_referenced == pool_.n_blocks());
}

}  // namespace omnibus
