// TokenMasker (token_mask.h): the trie walk, the LRU of masks, apply().
#include "grammar/token_mask.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <unordered_map>

#include "grammar/token_mask_apply_avx2.h"
#include "grammar/token_mask_internal.h"
#include "kernels/cpu_features.h"
#include "util/check.h"

namespace omnibus::grammar {
namespace {

// The walk meets the same grammar states again and again (inside a JSON
// string, every ordinary byte leads back to the same state), so it interns
// states and memoizes their transitions: once a (state, byte) pair is known,
// a trie node costs one table lookup. At most 4096 states per walk get
// a transition row (detail::g_walk_max_interned); states beyond that live in per-depth matchers and
// are advanced directly (correct, just slower).
constexpr int32_t kUnknown = -2;  // transition not computed yet
constexpr int32_t kDead = -1;     // the grammar rejects the byte

struct Frame {
  uint32_t node;
  uint32_t next_edge;
  int32_t state;  // >= 0: interned state id; < 0: the per-depth matcher at this depth
};

// Per-thread scratch, reused by every walk on this thread. Holds a reference
// to the last grammar walked here until a walk on another grammar.
struct WalkScratch {
  std::vector<GrammarMatcher> depth_matchers;  // [depth] non-interned states
  std::vector<GrammarMatcher> states;          // interned
  std::vector<std::bitset<256>> next;          // [state] next_bytes()
  std::vector<int32_t> trans;                  // [state * 256 + byte]
  std::unordered_map<std::string, int32_t> ids;
  std::vector<Frame> frames;
};
thread_local WalkScratch t_walk;

}  // namespace

namespace detail {
std::atomic<size_t> g_walk_max_interned{4096};
}  // namespace detail

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> grammar,
                         std::shared_ptr<const VocabTrie> trie, size_t cache_entries)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), cache_entries_(cache_entries) {
  OMNIBUS_CHECK(grammar_ != nullptr && trie_ != nullptr);
}

int32_t TokenMasker::n_vocab() const { return trie_->n_vocab(); }

const std::shared_ptr<const Grammar>& TokenMasker::grammar() const { return grammar_; }

GrammarMatcher TokenMasker::start() const { return GrammarMatcher(grammar_); }

std::shared_ptr<const TokenBitmask> TokenMasker::allowed(const GrammarMatcher& m) const {
  OMNIBUS_CHECK(m.grammar().get() == grammar_.get());  // keys are positions of one grammar
  const std::string& key = m.state_key();
  if (cache_entries_ > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const TokenBitmask> mask = compute(m);  // outside the lock
  const double walk = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++misses_;
    walk_seconds_ += walk;
  }
  if (cache_entries_ > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;  // another thread was first
    lru_.emplace_front(key, mask);
    index_.emplace(key, lru_.begin());
    while (lru_.size() > cache_entries_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return mask;
}

std::shared_ptr<const TokenBitmask> TokenMasker::cached(const GrammarMatcher& m) const {
  OMNIBUS_CHECK(m.grammar().get() == grammar_.get());
  if (cache_entries_ == 0) return nullptr;
  const std::string& key = m.state_key();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->second;
}

std::shared_ptr<const TokenBitmask> TokenMasker::compute(const GrammarMatcher& m) const {
  const VocabTrie& t = *trie_;
  auto mask = std::make_shared<TokenBitmask>((static_cast<size_t>(t.n_vocab()) + 63) / 64, 0);
  auto set = [&](int32_t id) { (*mask)[id >> 6] |= uint64_t{1} << (id & 63); };
  if (m.can_end()) {
    for (int32_t id : t.vocab_.eog_ids) {
      if (id >= 0 && id < t.n_vocab()) set(id);
    }
  }
  if (m.failed() || m.is_complete()) return mask;

  WalkScratch& w = t_walk;
  if (!w.depth_matchers.empty() && w.depth_matchers[0].automaton_ != m.automaton_) {
    w.depth_matchers.clear();
  }
  w.states.clear();
  w.next.clear();
  w.trans.clear();
  w.ids.clear();
  w.frames.clear();
  const size_t max_interned = detail::g_walk_max_interned.load(std::memory_order_relaxed);
  // Interns the state of `src` if there is room; returns its id or -1.
  auto intern = [&](const GrammarMatcher& src) -> int32_t {
    auto it = w.ids.find(src.state_key());
    if (it != w.ids.end()) return it->second;
    if (w.states.size() >= max_interned) return -1;
    const int32_t id = static_cast<int32_t>(w.states.size());
    w.ids.emplace(src.state_key(), id);
    w.states.push_back(src);
    w.next.push_back(src.next_bytes());
    w.trans.resize(w.trans.size() + 256, kUnknown);
    return id;
  };
  auto depth_matcher = [&](size_t depth) -> GrammarMatcher& {
    while (w.depth_matchers.size() <= depth) w.depth_matchers.push_back(m);
    return w.depth_matchers[depth];
  };
  const int32_t root = intern(m);
  if (root < 0) depth_matcher(0).copy_state_from(m);
  w.frames.push_back({0, t.nodes_[0].edge_begin, root});
  while (!w.frames.empty()) {
    Frame& f = w.frames.back();
    const size_t depth = w.frames.size() - 1;
    if (f.next_edge == t.nodes_[f.node].edge_end) {
      w.frames.pop_back();
      continue;
    }
    const uint32_t e = f.next_edge++;
    const uint8_t b = t.edge_byte_[e];
    const int32_t from = f.state;
    int32_t to = kUnknown;
    if (from >= 0) {
      if (!w.next[from][b]) continue;
      to = w.trans[static_cast<size_t>(from) * 256 + b];
      if (to == kDead) continue;
    }
    if (to == kUnknown) {
      GrammarMatcher& child = depth_matcher(depth + 1);  // grows the vector first
      const GrammarMatcher& parent = from >= 0 ? w.states[from] : w.depth_matchers[depth];
      if (from < 0 && !parent.next_bytes()[b]) continue;
      child.copy_state_from(parent);
      if (!child.accept_byte(b)) {
        if (from >= 0) w.trans[static_cast<size_t>(from) * 256 + b] = kDead;
        continue;
      }
      to = intern(child);  // may reallocate w.states: `parent` is not used below
      if (to >= 0 && from >= 0) w.trans[static_cast<size_t>(from) * 256 + b] = to;
    }
    const uint32_t child_node = t.edge_child_[e];
    const VocabTrie::Node& cn = t.nodes_[child_node];
    for (uint32_t i = cn.token_begin; i < cn.token_end; ++i) set(t.tokens_[i]);
    if (cn.edge_begin != cn.edge_end) {
      w.frames.push_back({child_node, cn.edge_begin, to});  // f may dangle now
    }
  }
  return mask;
}

void TokenMasker::apply(const TokenBitmask& mask, float* logits, int32_t n_vocab) {
  OMNIBUS_CHECK(mask.size() * 64 >= static_cast<size_t>(n_vocab));
  if (cpu_features().use_avx2()) return apply_mask_avx2(mask.data(), logits, n_vocab);
  apply_ref(mask, logits, n_vocab);
}

void TokenMasker::apply_ref(const TokenBitmask& mask, float* logits, int32_t n_vocab) {
  OMNIBUS_CHECK(mask.size() * 64 >= static_cast<size_t>(n_vocab));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Word by word: a word of all-allowed tokens is skipped, one of
  // all-forbidden is filled; only mixed words test bit by bit.
  for (int32_t base = 0; base < n_vocab; base += 64) {
    const uint64_t w = mask[size_t(base) >> 6];
    const int32_t n = std::min<int32_t>(64, n_vocab - base);
    if (w == ~uint64_t{0}) continue;
    if (w == 0) {
      std::fill(logits + base, logits + base + n, kNegInf);
      continue;
    }
    for (int32_t j = 0; j < n; ++j) {
      if (((w >> j) & 1) == 0) logits[base + j] = kNegInf;
    }
  }
}

bool TokenMasker::accept_token(GrammarMatcher& m, int32_t id) const {
  if (id < 0 || id >= n_vocab()) return false;
  if (is_eog(id)) return m.can_end();
  const VocabBytes& v = trie_->vocab_;
  if (!v.maskable[id] || v.pieces[id].empty()) return false;
  return m.accept_bytes(v.pieces[id]);
}

TokenMasker::CacheStats TokenMasker::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return CacheStats{hits_, misses_, walk_seconds_};
}

bool TokenMasker::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && trie_->is_eog_[id];
}

}  // namespace omnibus::grammar
