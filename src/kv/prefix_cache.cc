#include "kv/prefix_cache.h"

#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/check.h"

namespace omnibus {

PrefixCache::PrefixCache(int32_t n_blocks, int32_t block_size) : block_size_(block_size) {
  OMNIBUS_CHECK(n_blocks >= 1 && block_size >= 1);
  meta_.resize(size_t(n_blocks));
  tokens_.resize(size_t(n_blocks) * size_t(block_size));
  map_.reserve(size_t(n_blocks));
}

uint64_t PrefixCache::chain_key(std::span<const int32_t> block_tokens, uint64_t parent) {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size() * sizeof(int32_t), parent);
}

std::vector<uint64_t> PrefixCache::chain_keys(std::span<const int32_t> tokens, int32_t n_blocks,
                                              int32_t block_size, uint64_t root) {
  OMNIBUS_CHECK(int64_t(n_blocks) * block_size <= int64_t(tokens.size()));
  std::vector<uint64_t> keys(static_cast<size_t>(n_blocks));
  uint64_t parent = root;
  for (int32_t i = 0; i < n_blocks; ++i) {
    parent = chain_key(tokens.subspan(size_t(i) * size_t(block_size), size_t(block_size)), parent);
    keys[size_t(i)] = parent;
  }
  return keys;
}

uint64_t PrefixCache::root_key(std::string_view cache_salt) {
  if (cache_salt.empty()) return kRootKey;
  // Domain-separated from block keys (which hash int32 tokens): a salt's
  // bytes with a tag no token block has.
  std::string tagged = "omnibus cache_salt\n";
  tagged += cache_salt;
  const uint64_t k = XXH3_64bits_withSeed(tagged.data(), tagged.size(), kRootKey);
  return k == kRootKey ? k ^ 1 : k;
}

void PrefixCache::extend_keys(const TokenView& t, int32_t n_blocks,
                              std::vector<uint64_t>& keys) const {
  OMNIBUS_CHECK(int64_t(n_blocks) * block_size_ <= t.size());
  std::vector<int32_t> straddling;  // a block split between head and tail
  for (int32_t i = int32_t(keys.size()); i < n_blocks; ++i) {
    const size_t first = size_t(i) * size_t(block_size_);
    const size_t n = size_t(block_size_);
    const int32_t* data;
    if (first + n <= t.head.size()) {
      data = t.head.data() + first;
    } else if (first >= t.head.size()) {
      data = t.tail.data() + (first - t.head.size());
    } else {
      straddling.resize(n);
      for (size_t j = 0; j < n; ++j) straddling[j] = t[int32_t(first + j)];
      data = straddling.data();
    }
    const uint64_t seed = i == 0 ? t.root : keys[size_t(i) - 1];
    keys.push_back(chain_key(std::span<const int32_t>(data, n), seed) & key_mask_);
  }
}

bool PrefixCache::same_tokens(int32_t block, const TokenView& t, int32_t i) const {
  const int32_t* stored = tokens_.data() + size_t(block) * size_t(block_size_);
  const int32_t first = i * block_size_;
  for (int32_t j = 0; j < block_size_; ++j) {
    if (stored[j] != t[first + j]) return false;
  }
  return true;
}

int32_t PrefixCache::find(uint64_t key, const TokenView& t, int32_t i, BlockRef parent) const {
  if (!is_valid(parent)) return -1;
  auto it = map_.find(key);
  if (it == map_.end()) return -1;
  const Meta& m = meta_[size_t(it->second)];
  if (m.parent.block != parent.block || m.parent.generation != parent.generation) return -1;
  if (parent.block < 0 && m.parent_key != t.root) return -1;  // another tenant's block 0
  return same_tokens(it->second, t, i) ? it->second : -1;
}

int32_t PrefixCache::insert(int32_t block, uint64_t key, const TokenView& t, int32_t i,
                            BlockRef parent) {
  OMNIBUS_CHECK(!meta_[size_t(block)].cached);
  if (!is_valid(parent)) return -1;
  auto it = map_.find(key);
  if (it != map_.end()) {
    const int32_t other = it->second;
    const Meta& m = meta_[size_t(other)];
    if (m.parent.block == parent.block && m.parent.generation == parent.generation &&
        (parent.block >= 0 || m.parent_key == t.root) && same_tokens(other, t, i)) {
      return other;  // a duplicate: computed twice (e.g. by two requests admitted together)
    }
    if (is_valid(m.parent)) return -1;  // a collision with a live entry: first one wins
    unregister(other);                  // stale: its parent was evicted or replaced
  }
  Meta& m = meta_[size_t(block)];
  m.cached = true;
  m.key = key;
  m.parent_key = parent.block < 0 ? t.root : meta_[size_t(parent.block)].key;
  m.parent = parent;
  int32_t* stored = tokens_.data() + size_t(block) * size_t(block_size_);
  for (int32_t j = 0; j < block_size_; ++j) stored[j] = t[i * block_size_ + j];
  map_.emplace(key, block);
  if (events_ != nullptr) {
    const std::optional<uint64_t> parent_key =
        parent.block < 0 ? std::nullopt : std::optional<uint64_t>(m.parent_key);
    events_->stored(key, parent_key, std::span<const int32_t>(stored, size_t(block_size_)),
                    block_size_);
  }
  return block;
}

void PrefixCache::unregister(int32_t block) {
  Meta& m = meta_[size_t(block)];
  OMNIBUS_CHECK(m.cached);
  auto it = map_.find(m.key);
  OMNIBUS_CHECK(it != map_.end() && it->second == block);
  map_.erase(it);
  m.cached = false;
  if (events_ != nullptr) events_->removed(m.key);
}

void PrefixCache::evict(int32_t block) {
  const Meta& m = meta_[size_t(block)];
  if (m.cached && evicted_ != nullptr) {
    const int32_t* stored = tokens_.data() + size_t(block) * size_t(block_size_);
    evicted_->push_back(
        Evicted{block, m.key, m.parent_key, std::vector<int32_t>(stored, stored + block_size_)});
  }
  if (m.cached) unregister(block);
  ++meta_[size_t(block)].generation;
}

void PrefixCache::clear() {
  for (Meta& m : meta_) {
    if (m.cached) {
      m.cached = false;
      ++m.generation;
    }
  }
  // One event for the whole set (not a removal per block); none when nothing changed.
  if (events_ != nullptr && !map_.empty()) events_->cleared();
  map_.clear();
}

std::vector<uint64_t> PrefixCache::keys() const {
  std::vector<uint64_t> out;
  out.reserve(map_.size());
  for (const auto& [key, block] : map_) out.push_back(key);
  return out;
}

void PrefixCache::check_integrity() const {
  size_t n_cached = 0;
  for (size_t b = 0; b < meta_.size(); ++b) {
    const Meta& m = meta_[b];
    if (!m.cached) continue;
    ++n_cached;
    auto it = map_.find(m.key);
    OMNIBUS_CHECK(it != map_.end() && it->second == int32_t(b));
    OMNIBUS_CHECK(m.parent.block < int32_t(meta_.size()) && m.parent.block != int32_t(b));
  }
  OMNIBUS_CHECK(n_cached == map_.size());
  for (const auto& [key, block] : map_) {
    OMNIBUS_CHECK(block >= 0 && size_t(block) < meta_.size());
    OMNIBUS_CHECK(meta_[size_t(block)].cached && meta_[size_t(block)].key == key);
  }
}

}  // namespace omnibus
