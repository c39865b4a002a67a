#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "util/check.h"

namespace omnibus {

KvCacheManager::KvCacheManager(int32_t n_blocks, int32_t block_size, bool enable_prefix_caching,
                               int32_t n_groups, int32_t window)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      n_groups_(n_groups),
      window_(n_groups > 1 ? window : 0),
      pool_(n_blocks),
      cache_(enable_prefix_caching ? n_blocks : 1, block_size) {
  OMNIBUS_CHECK(block_size >= 1);
  OMNIBUS_CHECK(n_groups >= 1 && n_groups < 128 && (n_groups == 1 || window >= 1));
  if (n_groups > 1) {
    group_of_.assign(size_t(n_blocks), 0);
    if (prefix_caching_) {
      anchor_.assign(size_t(n_groups - 1) * size_t(n_blocks), Anchor{});
      anchor_of_.assign(size_t(n_blocks), -1);
    }
  }
}

int32_t KvCacheManager::add_seq() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = int32_t(seqs_.size());
    seqs_.emplace_back();
    seqs_.back().slide.resize(size_t(n_groups_ - 1));
  }
  Seq& s = seqs_[size_t(id)];
  OMNIBUS_CHECK(!s.live && s.blocks.empty());
  s.live = true;
  s.n_tokens = 0;
  s.n_slid = 0;
  s.n_cached_blocks = 0;
  s.last = PrefixCache::BlockRef{};
  s.stop_caching = false;
  ++n_live_;
  return id;
}

bool KvCacheManager::is_cache_entry(int32_t block) const {
  if (!prefix_caching_) return false;
  if (group_of_.empty() || group_of_[size_t(block)] == 0) return cache_.is_cached(block);
  return anchor_of_[size_t(block)] >= 0;
}

void KvCacheManager::free(int32_t seq, std::vector<int32_t>* freed) {
  OMNIBUS_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live);
  Seq& s = seqs_[size_t(seq)];
  // Release last block first, so that the free list's LRU order evicts a
  // sequence's tail before its (more shareable) head once prefixes are cached;
  // the sliding groups' blocks before group 0's, as they only serve a hit
  // together with group 0's. A block that is no cache entry is reused first
  // (BlockPool::release).
  auto release_all = [&](std::vector<int32_t>& table) {
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it == kNoBlock) continue;
      pool_.release(*it, /*keep=*/is_cache_entry(*it));
      if (freed != nullptr && pool_.ref_count(*it) == 0) freed->push_back(*it);
    }
    table.clear();  // keeps capacity
  };
  for (std::vector<int32_t>& t : s.slide) release_all(t);
  release_all(s.blocks);
  s.n_tokens = 0;
  s.n_slid = 0;
  s.n_cached_blocks = 0;
  s.live = false;
  free_ids_.push_back(seq);
  --n_live_;
}

void KvCacheManager::truncate(int32_t seq, int32_t n_tokens, std::vector<int32_t>* freed) {
  OMNIBUS_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live);
  Seq& s = seqs_[size_t(seq)];
  OMNIBUS_CHECK(n_tokens >= 0 && n_tokens <= s.n_tokens);
  OMNIBUS_CHECK(s.n_cached_blocks * block_size_ <= n_tokens);
  const int32_t keep = blocks_for(n_tokens);
  OMNIBUS_CHECK(s.n_slid <= keep);
  auto cut = [&](std::vector<int32_t>& table) {
    while (int32_t(table.size()) > keep) {
      const int32_t b = table.back();
      table.pop_back();
      OMNIBUS_CHECK(b != kNoBlock);
      pool_.release(b, /*keep=*/is_cache_entry(b));
      if (freed != nullptr && pool_.ref_count(b) == 0) freed->push_back(b);
    }
  };
  for (std::vector<int32_t>& t : s.slide) cut(t);
  cut(s.blocks);
  s.n_tokens = n_tokens;
}

int32_t KvCacheManager::fork(int32_t parent) {
  OMNIBUS_CHECK(parent >= 0 && size_t(parent) < seqs_.size() && seqs_[size_t(parent)].live);
  const int32_t child = add_seq();  // may reallocate seqs_: index after
  const Seq& p = seqs_[size_t(parent)];
  Seq& c = seqs_[size_t(child)];
  c.blocks.assign(p.blocks.begin(), p.blocks.end());
  for (size_t g = 0; g < p.slide.size(); ++g)
    c.slide[g].assign(p.slide[g].begin(), p.slide[g].end());
  c.n_tokens = p.n_tokens;
  c.n_slid = p.n_slid;
  c.n_cached_blocks = p.n_cached_blocks;
  c.last = p.last;
  c.stop_caching = p.stop_caching;
  for (int32_t b : c.blocks) pool_.ref(b);
  for (const std::vector<int32_t>& t : c.slide) {
    for (int32_t b : t) {
      if (b != kNoBlock) pool_.ref(b);
    }
  }
  return child;
}

int32_t KvCacheManager::share_prefix(int32_t seq, int32_t n_blocks) {
  OMNIBUS_CHECK(n_groups() == 1);
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

void KvCacheManager::slide(int32_t seq, int32_t n_computed, std::vector<int32_t>* freed) {
  if (n_groups() == 1) return;
  Seq& s = seqs_[size_t(seq)];
  OMNIBUS_CHECK(s.live && n_computed >= 0 && n_computed <= s.n_tokens);
  // Every sliding group has the one window, so one n_slid covers them all.
  const int32_t first = first_kept_block(n_computed);
  for (size_t g = 0; g < s.slide.size(); ++g) {
    std::vector<int32_t>& table = s.slide[g];
    for (int32_t j = s.n_slid; j < first; ++j) {
      const int32_t b = table[size_t(j)];
      table[size_t(j)] = kNoBlock;
      pool_.release(b, /*keep=*/is_cache_entry(b));
      if (freed != nullptr && pool_.ref_count(b) == 0) freed->push_back(b);
    }
  }
  s.n_slid = std::max(s.n_slid, first);
}

int32_t KvCacheManager::take_block(int32_t group) {
  const int32_t id = pool_.allocate();
  if (prefix_caching_) {
    // LRU eviction: the least recently freed goes first. evict() also
    // bumps the block's generation, so nothing anchored to it stays valid.
    if (!group_of_.empty() && group_of_[size_t(id)] != 0) drop_anchor(id);
    cache_.evict(id);
  }
  if (!group_of_.empty()) group_of_[size_t(id)] = int8_t(group);
  return id;
}

int32_t KvCacheManager::anchored(int32_t group, PrefixCache::BlockRef anchor) const {
  const Anchor& a = anchor_[size_t(group - 1) * size_t(pool_.n_blocks()) + size_t(anchor.block)];
  if (a.block < 0 || a.generation != anchor.generation) return -1;
  if (anchor_of_[size_t(a.block)] != anchor.block || group_of_[size_t(a.block)] != group) return -1;
  return a.block;
}

void KvCacheManager::register_anchored(int32_t group, int32_t block, PrefixCache::BlockRef anchor) {
  if (anchor_of_[size_t(block)] >= 0) return;  // registered already (a hit, a fork)
  if (anchored(group, anchor) >= 0) return;    // a duplicate: the other block stays canonical
  Anchor& a = anchor_[size_t(group - 1) * size_t(pool_.n_blocks()) + size_t(anchor.block)];
  // A stale entry (its anchor re-registered since) stops being one.
  if (a.block >= 0 && anchor_of_[size_t(a.block)] == anchor.block) anchor_of_[size_t(a.block)] = -1;
  a = Anchor{block, anchor.generation};
  anchor_of_[size_t(block)] = anchor.block;
}

void KvCacheManager::drop_anchor(int32_t block) {
  const int32_t a = anchor_of_[size_t(block)];
  if (a < 0) return;
  const int32_t g = group_of_[size_t(block)];
  Anchor& e = anchor_[size_t(g - 1) * size_t(pool_.n_blocks()) + size_t(a)];
  if (e.block == block) e = Anchor{};
  anchor_of_[size_t(block)] = -1;
}

void KvCacheManager::clear_prefix_cache() {
  cache_.clear();
  std::fill(anchor_.begin(), anchor_.end(), Anchor{});
  std::fill(anchor_of_.begin(), anchor_of_.end(), -1);
}

void KvCacheManager::match_prefix(const TokenView& t, int32_t max_blocks,
                                  std::vector<uint64_t>& keys, PrefixMatch& out) const {
  out.clear();
  if (!prefix_caching_) return;
  max_blocks = std::min(max_blocks, t.size() / block_size_);
  if (max_blocks <= 0) return;
  cache_.extend_keys(t, max_blocks, keys);
  PrefixCache::BlockRef parent;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const int32_t b = cache_.find(keys[size_t(i)], t, i, parent);
    if (b < 0) break;
    out.blocks.push_back(b);
    parent = cache_.ref_of(b);
  }
  if (n_groups() > 1 && !out.blocks.empty()) {
    // Longest L <= the chain's length such that every sliding group holds
    // the blocks of positions L * bs - w + 1 .. L * bs - 1 (the window of
    // the next token): run[g][i] = consecutive hits of group g ending at i.
    const int32_t n = out.n_blocks();
    thread_local std::vector<int32_t> hit, run;
    const size_t n_slide = size_t(n_groups() - 1);
    hit.assign(n_slide * size_t(n), -1);
    run.assign(n_slide * size_t(n), 0);
    for (size_t g = 0; g < n_slide; ++g) {
      for (int32_t i = 0; i < n; ++i) {
        const size_t k = g * size_t(n) + size_t(i);
        hit[k] = anchored(int32_t(g + 1), cache_.ref_of(out.blocks[size_t(i)]));
        run[k] = hit[k] < 0 ? 0 : (i > 0 ? run[k - 1] : 0) + 1;
      }
    }
    int32_t L = n;
    for (; L > 0; --L) {
      const int32_t need = L - first_kept_block(L * block_size_);
      bool ok = true;
      for (size_t g = 0; g < n_slide && ok; ++g) ok = run[g * size_t(n) + size_t(L - 1)] >= need;
      if (ok) break;
    }
    out.blocks.resize(size_t(L));
    out.window_first = first_kept_block(L * block_size_);
    for (size_t g = 0; g < n_slide; ++g) {
      for (int32_t i = out.window_first; i < L; ++i)
        out.window.push_back(hit[g * size_t(n) + size_t(i)]);
    }
  }
  for (int32_t b : out.blocks) out.n_free += pool_.ref_count(b) == 0;
  for (int32_t b : out.window) out.n_free += pool_.ref_count(b) == 0;
}

void KvCacheManager::truncate_match(PrefixMatch& m, int32_t n) const {
  OMNIBUS_CHECK(n_groups() == 1);
  OMNIBUS_CHECK(n >= 0 && n <= m.n_blocks());
  for (int32_t i = n; i < m.n_blocks(); ++i) m.n_free -= pool_.ref_count(m.blocks[size_t(i)]) == 0;
  m.blocks.resize(size_t(n));
}

void KvCacheManager::attach_prefix(int32_t seq, const PrefixMatch& m) {
  Seq& s = seqs_[size_t(seq)];
  OMNIBUS_CHECK(s.live && s.n_tokens == 0 && s.blocks.empty());
  if (m.blocks.empty()) return;
  OMNIBUS_CHECK(prefix_caching_);
  auto hold = [&](int32_t b) {
    if (pool_.ref_count(b) == 0) {
      pool_.take_free(b);
    } else {
      pool_.ref(b);
    }
  };
  for (int32_t b : m.blocks) {
    OMNIBUS_CHECK(cache_.is_cached(b));
    hold(b);
    s.blocks.push_back(b);
  }
  const int32_t L = m.n_blocks();
  if (n_groups() > 1) {
    const int32_t n_window = L - m.window_first;
    OMNIBUS_CHECK(m.window_first >= 0 && n_window >= 0 &&
                  m.window.size() == size_t(n_groups() - 1) * size_t(n_window));
    for (size_t g = 0; g < s.slide.size(); ++g) {
      std::vector<int32_t>& table = s.slide[g];
      table.assign(size_t(m.window_first), kNoBlock);
      for (int32_t i = 0; i < n_window; ++i) {
        const int32_t b = m.window[g * size_t(n_window) + size_t(i)];
        OMNIBUS_CHECK(anchor_of_[size_t(b)] == s.blocks[size_t(m.window_first + i)]);
        hold(b);
        table.push_back(b);
      }
    }
    s.n_slid = m.window_first;
  }
  s.n_tokens = L * block_size_;
  s.n_cached_blocks = L;
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
    // The sliding groups' blocks of this position, under the canonical
    // group-0 block (what a later match verifies its chain against).
    for (size_t g = 0; g < s.slide.size(); ++g) {
      const int32_t sb = s.slide[g][size_t(i)];
      if (sb != kNoBlock) register_anchored(int32_t(g + 1), sb, s.last);
    }
    s.n_cached_blocks = i + 1;
  }
}

bool KvCacheManager::needs_copy_on_write(const Seq& s, const std::vector<int32_t>& table) const {
  return s.n_tokens % block_size_ != 0 && pool_.ref_count(table.back()) > 1;
}

int32_t KvCacheManager::n_copies_on_write(const Seq& s) const {
  int32_t n = needs_copy_on_write(s, s.blocks) ? 1 : 0;
  for (const std::vector<int32_t>& t : s.slide) n += needs_copy_on_write(s, t) ? 1 : 0;
  return n;
}

int32_t KvCacheManager::num_blocks_needed(int32_t seq, int32_t n_new) const {
  const Seq& s = seqs_[size_t(seq)];
  OMNIBUS_DCHECK(s.live && n_new >= 0);
  if (n_new == 0) return 0;
  return n_groups() * (blocks_for(s.n_tokens + n_new) - int32_t(s.blocks.size())) +
         n_copies_on_write(s);
}

int32_t KvCacheManager::max_new_slots(int32_t seq, int32_t spare) const {
  const Seq& s = seqs_[size_t(seq)];
  const int32_t left = spare - n_copies_on_write(s);
  if (left < 0) return 0;
  const int32_t open = int32_t(s.blocks.size()) * block_size_ - s.n_tokens;
  return open + left / n_groups() * block_size_;
}

bool KvCacheManager::allocate_slots(int32_t seq, int32_t n_new, std::vector<BlockCopy>& copies) {
  if (n_new == 0) return true;
  if (!can_allocate(seq, n_new)) return false;
  Seq& s = seqs_[size_t(seq)];
  const int32_t n_blocks = blocks_for(s.n_tokens + n_new);
  auto grow = [&](std::vector<int32_t>& table, int32_t group) {
    if (needs_copy_on_write(s, table)) {
      const int32_t src = table.back();
      const int32_t dst = take_block(group);
      pool_.release(src);  // still held by the other table(s)
      table.back() = dst;
      copies.push_back(BlockCopy{src, dst});
    }
    while (int32_t(table.size()) < n_blocks) table.push_back(take_block(group));
  };
  grow(s.blocks, 0);
  for (size_t g = 0; g < s.slide.size(); ++g) grow(s.slide[g], int32_t(g + 1));
  s.n_tokens += n_new;
  return true;
}

double KvCacheManager::n_unfilled_slots() const {
  double n = 0;
  for (const Seq& s : seqs_) {
    if (!s.live || s.blocks.empty()) continue;
    const int32_t unfilled = int32_t(s.blocks.size()) * block_size_ - s.n_tokens;
    if (unfilled == 0) continue;
    n += double(unfilled) / double(pool_.ref_count(s.blocks.back()));
    for (const std::vector<int32_t>& t : s.slide)
      n += double(unfilled) / double(pool_.ref_count(t.back()));
  }
  return n;
}

void KvCacheManager::check_integrity() const {
  pool_.check_integrity();
  std::vector<int32_t> holders(size_t(pool_.n_blocks()), 0);
  int32_t n_live = 0;
  for (const Seq& s : seqs_) {
    OMNIBUS_CHECK(s.slide.size() == size_t(n_groups_ - 1));
    if (!s.live) {
      OMNIBUS_CHECK(s.blocks.empty());
      for (const std::vector<int32_t>& t : s.slide) OMNIBUS_CHECK(t.empty());
      continue;
    }
    ++n_live;
    OMNIBUS_CHECK(int32_t(s.blocks.size()) == blocks_for(s.n_tokens));
    OMNIBUS_CHECK(s.n_cached_blocks >= 0 && s.n_cached_blocks * block_size_ <= s.n_tokens);
    for (int32_t b : s.blocks) {
      OMNIBUS_CHECK(b >= 0 && b < pool_.n_blocks());
      OMNIBUS_CHECK(group_of_.empty() || group_of_[size_t(b)] == 0);
      ++holders[size_t(b)];
    }
    // A sliding table: the same length, kNoBlock exactly before n_slid, and
    // never past what the window of the next token allows to let go.
    OMNIBUS_CHECK(s.n_slid >= 0 && s.n_slid <= first_kept_block(s.n_tokens));
    for (size_t g = 0; g < s.slide.size(); ++g) {
      const std::vector<int32_t>& t = s.slide[g];
      OMNIBUS_CHECK(t.size() == s.blocks.size());
      for (size_t j = 0; j < t.size(); ++j) {
        const int32_t b = t[j];
        if (int32_t(j) < s.n_slid) {
          OMNIBUS_CHECK(b == kNoBlock);
          continue;
        }
        OMNIBUS_CHECK(b >= 0 && b < pool_.n_blocks() && group_of_[size_t(b)] == int8_t(g + 1));
        ++holders[size_t(b)];
      }
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
    // A sliding group's entry is a block of that group, and the anchor table
    // names it back.
    for (int32_t b = 0; b < int32_t(anchor_of_.size()); ++b) {
      const int32_t a = anchor_of_[size_t(b)];
      if (a < 0) continue;
      const int32_t g = group_of_[size_t(b)];
      OMNIBUS_CHECK(g >= 1 && a < pool_.n_blocks());
      OMNIBUS_CHECK(anchor_[size_t(g - 1) * size_t(pool_.n_blocks()) + size_t(a)].block == b);
    }
  } else {
    OMNIBUS_CHECK(cache_.n_cached() == 0);
  }
}

}  // namespace omnibus
