// VocabTrie and TokenMasker: which tokens of a vocabulary a GrammarMatcher
// allows next.
//
// VocabTrie is built once per vocabulary (the server holds one): a byte trie
// over every token's bytes. A TokenMasker pairs one Grammar with the trie;
// allowed(m) walks the trie from m's state, cutting every branch whose bytes
// the grammar rejects, so the cost is the number of trie nodes still alive,
// not the vocabulary size. Masks are cached by GrammarMatcher::state_key()
// (LRU, bounded), shared by every sequence using this masker (the server
// caches one masker per grammar text, structured_output.h): 64 requests
// with one schema pay for each state once.
//
// Token classes:
//   - normal and user-defined tokens: allowed iff all their bytes are accepted;
//   - end tokens (`eog_ids`): allowed iff the matcher can_end();
//   - control, unknown and unused tokens, and tokens with no bytes: never.
// When the matcher is complete, only the end tokens are allowed.
//
// The walk interns the grammar states it meets and memoizes (state, byte)
// transitions, so a trie node whose state was seen costs a table lookup.
// Measured (src/grammar/token_mask_bench.cc, cold, llama.cpp's json.gbnf,
// shared 2-core box): 49k tokens in a string state ~10 ms CPU, 262k ~52 ms;
// after `{` 0.03 / 0.09 ms.
//
// Thread-safety: allowed() and apply() may run concurrently on many threads
// (the cache is guarded by a mutex, masks are computed outside it; the walk
// itself uses thread-local scratch).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar_matcher.h"

namespace omnibus::grammar {

struct VocabBytes {
  std::vector<std::string> pieces;  // [n_vocab] bytes of each token ("" when it has none)
  std::vector<bool> maskable;       // [n_vocab] false: control/unknown/unused (never allowed)
  std::vector<int32_t> eog_ids;     // end-of-generation tokens
};

// A mask over the vocabulary: bit i set <=> token i allowed.
using TokenBitmask = std::vector<uint64_t>;  // [(n_vocab + 63) / 64]

class VocabTrie {
 public:
  explicit VocabTrie(VocabBytes vocab);
  int32_t n_vocab() const;
  const VocabBytes& vocab() const;

 private:
  friend class TokenMasker;
  // Nodes in breadth-first order, node 0 the root (the empty prefix). A
  // node's children are the contiguous edges [edge_begin, edge_end), sorted
  // by byte; the tokens whose bytes end at the node are
  // tokens_[token_begin, token_end). Holds only tokens that can ever be
  // allowed by their bytes: maskable, non-empty, not an end token.
  struct Node {
    uint32_t edge_begin = 0, edge_end = 0;
    uint32_t token_begin = 0, token_end = 0;
  };
  VocabBytes vocab_;
  std::vector<Node> nodes_;
  std::vector<uint8_t> edge_byte_;    // [n_edges]
  std::vector<uint32_t> edge_child_;  // [n_edges]
  std::vector<int32_t> tokens_;
  std::vector<bool> is_eog_;  // [n_vocab]
};

class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie,
              size_t cache_entries = 4096);

  int32_t n_vocab() const;
  const std::shared_ptr<const Grammar>& grammar() const;
  GrammarMatcher start() const;  // a matcher at the grammar's start

  // REQUIRES: m runs on this masker's grammar (the same Grammar object).
  // The mask for m's state (cached). Never empty of allowed tokens unless the
  // grammar and vocabulary leave no way on (then the caller ends the stream).
  std::shared_ptr<const TokenBitmask> allowed(const GrammarMatcher& m) const;
  // The cached mask for m's state (a hit), or null (nothing is computed and
  // no miss is counted).
  std::shared_ptr<const TokenBitmask> cached(const GrammarMatcher& m) const;

  // logits[i] = -inf for every token the mask forbids (AVX2 where the CPU
  // has it, else apply_ref; bitwise the same).
  static void apply(const TokenBitmask& mask, float* logits, int32_t n_vocab);
  // The scalar reference of apply.
  static void apply_ref(const TokenBitmask& mask, float* logits, int32_t n_vocab);

  // Advances m by token id's bytes; false if the grammar rejects them (m unchanged).
  // An end token returns m.can_end() and leaves m as it is; a control,
  // unknown or empty token, or an id out of range, returns false.
  bool accept_token(GrammarMatcher& m, int32_t id) const;
  bool is_eog(int32_t id) const;

  // allowed() calls answered from the cache, and those that walked the trie
  // (with the walks' total time). Monotonic; any thread.
  struct CacheStats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    double walk_seconds = 0;
  };
  CacheStats cache_stats() const;

 private:
  using CacheList = std::list<std::pair<std::string, std::shared_ptr<const TokenBitmask>>>;
  // The walk: the mask for m's state, uncached.
  std::shared_ptr<const TokenBitmask> compute(const GrammarMatcher& m) const;

  // Constant after construction.
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabTrie> trie_;
  size_t cache_entries_;

  // Guarded by mu_: the LRU of masks by state_key (front = most recent).
  mutable std::mutex mu_;
  mutable CacheList lru_;
  mutable std::unordered_map<std::string, CacheList::iterator> index_;
  mutable uint64_t hits_ = 0, misses_ = 0;  // guarded by mu_
  mutable double walk_seconds_ = 0;         // guarded by mu_
};

}  // namespace omnibus::grammar
