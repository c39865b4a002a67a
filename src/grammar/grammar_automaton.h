// Automaton: a Grammar flattened for GrammarMatcher (internal to grammar/).
//
// Every element position (rule, alternative, index) gets an int32 id; the
// position one past the last element of an alternative is an "end" position.
// Positions of one alternative are consecutive, so advancing past an element
// is id + 1.
//
// A stack is a list of positions, bottom first. closure(q) is everything a
// stack whose top is q can become without consuming a byte, relative to the
// stack below q: a set of "relative stacks" (each replaces q; each top is a
// bytes position) and a `pop` flag (q's frame can finish, so the caller
// continues with the position below). A reference in last position pushes
// nothing (it replaces its own frame), so epsilon loops like (x?)* revisit a
// configuration already seen and the closure terminates. Closures are
// computed on first use and cached; if one grows beyond its bounds it is
// marked `overflow` and the matcher using it fails.
//
// Thread-safety: immutable tables plus a closure cache that any number of
// threads may fill concurrently (computed under a mutex, published through
// atomics; lookups after the first are lock-free).
#pragma once

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/grammar.h"

namespace omnibus::grammar::detail {

struct Closure {
  std::vector<int32_t> stacks;  // [len, pos * len]* relative stacks, bottom first
  bool pop = false;
  bool overflow = false;
};

class Automaton {
 public:
  enum Kind : uint8_t { kBytes, kRef, kEnd };

  // REQUIRES: every kRule element names a rule in g.rules; g.root is valid.
  explicit Automaton(const Grammar& g);

  int32_t start() const { return start_; }  // a reference to the root in last position
  Kind kind(int32_t pos) const { return static_cast<Kind>(kind_[pos]); }
  const std::bitset<256>& bytes(int32_t pos) const { return byte_sets_[arg_[pos]]; }
  bool accepts(int32_t pos, uint8_t b) const { return byte_sets_[arg_[pos]][b]; }
  const Closure& closure(int32_t pos) const;

 private:
  const Closure* compute(int32_t pos) const;

  std::vector<uint8_t> kind_;  // [n_positions]
  std::vector<int32_t> arg_;   // kBytes: index into byte_sets_; kRef: rule
  std::vector<std::bitset<256>> byte_sets_;
  std::vector<std::vector<int32_t>> alt_starts_;  // [n_rules] first position of each alternative
  int32_t start_ = -1;

  mutable std::mutex mu_;
  mutable std::unique_ptr<std::atomic<const Closure*>[]> cache_;  // [n_positions]
  mutable std::vector<std::unique_ptr<Closure>> owned_;           // guarded by mu_
};

}  // namespace omnibus::grammar::detail
