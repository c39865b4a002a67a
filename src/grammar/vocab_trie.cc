// VocabTrie construction (token_mask.h): sort the pieces, then build the
// trie breadth-first from sorted ranges, iteratively (a piece can be long).
#include <algorithm>
#include <deque>

#include "grammar/token_mask.h"
#include "util/check.h"

namespace omnibus::grammar {

VocabTrie::VocabTrie(VocabBytes vocab) : vocab_(std::move(vocab)) {
  const size_t n = vocab_.pieces.size();
  OMNIBUS_CHECK(vocab_.maskable.size() == n);
  is_eog_.assign(n, false);
  for (int32_t id : vocab_.eog_ids) {
    if (id >= 0 && static_cast<size_t>(id) < n) is_eog_[id] = true;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) {
    if (vocab_.maskable[i] && !vocab_.pieces[i].empty() && !is_eog_[i])
      ids.push_back(static_cast<int32_t>(i));
  }
  const auto& pieces = vocab_.pieces;
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces[a] != pieces[b] ? pieces[a] < pieces[b] : a < b;
  });
  struct Pending {
    uint32_t node;
    size_t lo, hi, depth;  // ids[lo, hi) share the first `depth` bytes
  };
  std::deque<Pending> queue;
  nodes_.push_back(Node{});
  queue.push_back({0, 0, ids.size(), 0});
  while (!queue.empty()) {
    const Pending p = queue.front();
    queue.pop_front();
    size_t i = p.lo;
    Node& node = nodes_[p.node];
    node.token_begin = static_cast<uint32_t>(tokens_.size());
    while (i < p.hi && pieces[ids[i]].size() == p.depth) tokens_.push_back(ids[i++]);
    node.token_end = static_cast<uint32_t>(tokens_.size());
    node.edge_begin = static_cast<uint32_t>(edge_byte_.size());
    while (i < p.hi) {
      const char b = pieces[ids[i]][p.depth];
      size_t j = i;
      while (j < p.hi && pieces[ids[j]][p.depth] == b) ++j;
      const uint32_t child = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{});  // may move `node`: only indices below
      edge_byte_.push_back(static_cast<uint8_t>(b));
      edge_child_.push_back(child);
      queue.push_back({child, i, j, p.depth + 1});
      i = j;
    }
    nodes_[p.node].edge_end = static_cast<uint32_t>(edge_byte_.size());
  }
}

int32_t VocabTrie::n_vocab() const { return static_cast<int32_t>(vocab_.pieces.size()); }

const VocabBytes& VocabTrie::vocab() const { return vocab_; }

}  // namespace omnibus::grammar
