#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "util/check.h"

namespace omnibus {

KvCacheManager::KvCacheManager(int32_t n_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      pool_(n_blocks),
      cache_(enable_prefix_caching ? n_blocks : 1, block_size) {
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
  s.n_cached_blocks = 0;
  s.last = PrefixCache::BlockRef{};
  s.stop_caching = false;
  ++n_live_;
  return id;
}

void KvCacheManager::free(int32_t seq, std::vector<int32_t>* freed) {
  OMNIBUS_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live);
  Seq& s = seqs_[size_t(seq)];
  // Release last block first, so that the free list's LRU order evicts a
  // sequence's tail before its (more shareable) head once prefixes are cached.
  // A block that is no cache entry is reused first (BlockPool::release).
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) {
    pool_.release(*it, /*keep=*/prefix_caching_ && cache_.is_cached(*it));
    if (freed != nullptr && pool_.ref_count(*it) == 0) freed->push_back(*it);
  }
  s.blocks.clear();  // keeps capacity
  s.n_tokens = 0;
  s.n_cached_blocks = 0;
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
  c.n_cached_blocks = p.n_cached_blocks;
  c.last = p.last;
  c.stop_caching = p.stop_caching;
  for (int32_t b : c.blocks) pool_.ref(b);
  return child;
}

int32_t KvCacheManager::share_prefix(int32_t seq, int32_t n_blocks) {
  OMNIBUS_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live);
  OMNIBUS_CHECK(n_blocks >= 0 && int64_t(n_blocks) * block_size_ <= seqs_[size_t(seq)].n_tokens);
  const int32_t pin = add_seq();  // may reallocate seqs_: index after
  const Seq& s = seqs_[size_t(seq)];
  Seq& p = seqs_[size_t(pin)];
  p.blocks.assign(s.blocks.begin(), s.blocks.begin() + n_blocks);
  p.n_tokens = n_blocks * block_size_;
  p.stop_caching = true;
  for (int32_t b : p.blocks) pool_.ref(b);
  return pin;
}

int32_t KvCacheManager::take_block() {
  const int32_t id = pool_.allocate();
  if (prefix_caching_) cache_.evict(id);  // LRU eviction: the least recently freed goes first
  return id;
}

void KvCacheManager::match_prefix(const TokenView& t, int32_t max_blocks, std::vector<uint64_t>& keys,
                                  PrefixMatch& out) const {
  out.blocks.clear();
  out.n_free = 0;
  if (!prefix_caching_) return;
  max_blocks = std::min(max_blocks, t.size() / block_size_);
  if (max_blocks <= 0) return;
  cache_.extend_keys(t, max_blocks, keys);
  PrefixCache::BlockRef parent;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const int32_t b = cache_.find(keys[size_t(i)], t, i, parent);
    if (b < 0) break;
    out.blocks.push_back(b);
    out.n_free += pool_.ref_count(b) == 0;
    parent = cache_.ref_of(b);
  }
}

void KvCacheManager::truncate_match(PrefixMatch& m, int32_t n) const {
  OMNIBUS_CHECK(n >= 0 && n <= m.n_blocks());
  for (int32_t i = n; i < m.n_blocks(); ++i) m.n_free -= pool_.ref_count(m.blocks[size_t(i)]) == 0;
  m.blocks.resize(size_t(n));
}

void KvCacheManager::attach_prefix(int32_t seq, const PrefixMatch& m) {
  Seq& s = seqs_[size_t(seq)];
  OMNIBUS_CHECK(s.live && s.n_tokens == 0 && s.blocks.empty());
  if (m.blocks.empty()) return;
  OMNIBUS_CHECK(prefix_caching_);
  for (int32_t b : m.blocks) {
    OMNIBUS_CHECK(cache_.is_cached(b));
    if (pool_.ref_count(b) == 0) {
      pool_.take_free(b);
    } else {
      pool_.ref(b);
    }
    s.blocks.push_back(b);
  }
  s.n_tokens = m.n_blocks() * block_size_;
  s.n_cached_blocks = m.n_blocks();
  s.last = cache_.ref_of(m.blocks.back());
}

void KvCacheManager::cache_full_blocks(int32_t seq, const TokenView& t, int32_t n_computed,
                                       std::vector<uint64_t>& keys) {
  if (!prefix_caching_) return;
  Seq& s = seqs_[size_t(seq)];
  OMNIBUS_CHECK(s.live && n_computed <= s.n_tokens && n_computed <= t.size());
  const int32_t n_full = n_computed / block_size_;
  if (s.stop_caching || n_full <= s.n_cached_blocks) return;
  cache_.extend_keys(t, n_full, keys);
  for (int32_t i = s.n_cached_blocks; i < n_full; ++i) {
    const int32_t b = s.blocks[size_t(i)];
    const int32_t canonical =
        cache_.is_cached(b) ? b : cache_.insert(b, keys[size_t(i)], t, i, s.last);
    if (canonical < 0) {
      s.stop_caching = true;
      return;
    }
    s.last = cache_.ref_of(canonical);
    s.n_cached_blocks = i + 1;
  }
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
    const int32_t dst = take_block();
    pool_.release(src);  // still held by the other table(s)
    s.blocks.back() = dst;
    copies.push_back(BlockCopy{src, dst});
  }
  const int32_t n_blocks = blocks_for(s.n_tokens + n_new);
  while (int32_t(s.blocks.size()) < n_blocks) s.blocks.push_back(take_block());
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
    OMNIBUS_CHECK(s.n_cached_blocks >= 0 && s.n_cached_blocks * block_size_ <= s.n_tokens);
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
  if (prefix_caching_) {
    cache_.check_integrity();
  } else {
    OMNIBUS_CHECK(cache_.n_cached() == 0);
  }
}

}  // namespace omnibus
