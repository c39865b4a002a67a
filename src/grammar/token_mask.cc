// TokenMasker (token_mask.h): the trie walk, the LRU of masks, apply().
#include "grammar/token_mask.h"

#include <limits>

#include "util/check.h"

namespace omnibus::grammar {
namespace {

struct Frame {
  uint32_t node;
  uint32_t next_edge;
  std::bitset<256> allowed;  // next_bytes() of the matcher at this depth
};

// Per-thread scratch for the walk: matchers[d] is the state after the first
// d bytes of the current trie path. Holds a reference to the last grammar
// walked on this thread until the next walk on another grammar.
struct WalkScratch {
  std::vector<GrammarMatcher> matchers;
  std::vector<Frame> frames;
};
thread_local WalkScratch t_walk;

}  // namespace

TokenMasker::TokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie,
                         size_t cache_entries)
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
      return it->second->second;
    }
  }
  std::shared_ptr<const TokenBitmask> mask = compute(m);  // outside the lock
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

  auto& matchers = t_walk.matchers;
  auto& frames = t_walk.frames;
  if (!matchers.empty() && matchers[0].automaton_ != m.automaton_) matchers.clear();
  if (matchers.empty()) matchers.push_back(m);
  matchers[0].copy_state_from(m);
  frames.clear();
  frames.push_back({0, t.nodes_[0].edge_begin, m.next_bytes()});
  while (!frames.empty()) {
    Frame& f = frames.back();
    const size_t depth = frames.size() - 1;
    if (f.next_edge == t.nodes_[f.node].edge_end) {
      frames.pop_back();
      continue;
    }
    const uint32_t e = f.next_edge++;
    const uint8_t b = t.edge_byte_[e];
    if (!f.allowed[b]) continue;
    if (matchers.size() <= depth + 1) matchers.push_back(m);
    GrammarMatcher& next = matchers[depth + 1];
    next.copy_state_from(matchers[depth]);
    if (!next.accept_byte(b)) continue;
    const VocabTrie::Node& child = t.nodes_[t.edge_child_[e]];
    for (uint32_t i = child.token_begin; i < child.token_end; ++i) set(t.tokens_[i]);
    if (child.edge_begin != child.edge_end) {
      frames.push_back({t.edge_child_[e], child.edge_begin, next.next_bytes()});  // f may dangle now
    }
  }
  return mask;
}

void TokenMasker::apply(const TokenBitmask& mask, float* logits, int32_t n_vocab) {
  OMNIBUS_CHECK(mask.size() * 64 >= static_cast<size_t>(n_vocab));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (((mask[i >> 6] >> (i & 63)) & 1) == 0) logits[i] = kNegInf;
  }
}

bool TokenMasker::accept_token(GrammarMatcher& m, int32_t id) const {
  if (id < 0 || id >= n_vocab()) return false;
  if (is_eog(id)) return m.can_end();
  const VocabBytes& v = trie_->vocab_;
  if (!v.maskable[id] || v.pieces[id].empty()) return false;
  return m.accept_bytes(v.pieces[id]);
}

bool TokenMasker::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && trie_->is_eog_[id];
}

}  // namespace omnibus::grammar
