// GrammarMatcher: where one output stream stands in a Grammar — a set of
// parse stacks (a pushdown automaton over bytes, kept nondeterministic so any
// context-free grammar without left recursion works).
//
// A state is the sorted, de-duplicated set of stacks; each stack's top is a
// kBytes element (positions are expanded through rule references and ends of
// sequences eagerly), or the stack is empty, which means "the root may end
// here". The state is canonical: two matchers on the same Grammar (or on two
// parses of the same text) whose stack sets are equal have equal state_key(),
// whatever bytes brought them there; TokenMasker caches masks by it. (Equal
// futures reached through different stacks may still differ in key: a cache
// miss, never a wrong mask.)
//
// Cost: positions are flat int32 ids (grammar_automaton.h); what a position
// expands to without consuming a byte is computed once per Grammar and shared
// by every matcher, so accept_byte() copies a few short stacks and sorts
// them, allocating nothing once the thread's scratch is warm.
//
//   accept_byte(b):  every stack whose top accepts b advances; stacks that do
//                    not are dropped. Returns false (and leaves the state
//                    unchanged) when no stack survives.
//   can_end():       some stack is empty: the output may stop here.
//   is_complete():   every stack is empty: no byte can follow (only the end).
//   failed():        a state exceeded kMaxStacks (an ambiguous grammar
//                    blowing up); the matcher rejects every byte from then on
//                    (can_end() false, next_bytes() empty, key "failed").
//   next_bytes():    may include a byte that leads nowhere (a continuation
//                    that matches nothing); accept_byte() is the truth.
//
// Thread-safety: a value type; one thread at a time per matcher. Copies are
// independent (the Grammar is shared, immutable).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace omnibus::grammar {

class TokenMasker;

class GrammarMatcher {
 public:
  static constexpr size_t kMaxStacks = 4096;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  bool accept_byte(uint8_t b);
  // All or nothing: false leaves the state as it was.
  bool accept_bytes(std::string_view bytes);

  bool can_end() const;
  bool is_complete() const;
  bool failed() const;

  // The set of bytes some stack accepts next.
  std::bitset<256> next_bytes() const;

  // A canonical encoding of the state (equal states <=> equal keys).
  const std::string& state_key() const;

  const std::shared_ptr<const Grammar>& grammar() const;

 private:
  friend class TokenMasker;
  // Appends to *out every stack `base + closure(q)` (and below, when q's
  // frame can finish). Sets *overflow when a closure overflowed.
  void expand(const int32_t* base, int32_t base_len, int32_t q, std::vector<int32_t>* out,
              bool* overflow) const;
  // Sorts and de-duplicates the stacks in raw into state_; false when there
  // are more than kMaxStacks.
  bool set_state(std::vector<int32_t>* raw);
  // REQUIRES: o is on the same Grammar. Copies only the state (no refcounts).
  void copy_state_from(const GrammarMatcher& o);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const detail::Automaton> owned_automaton_;  // hand-built grammars only
  const detail::Automaton* automaton_ = nullptr;
  std::vector<int32_t> state_;  // [len, positions bottom first]*, sorted, distinct
  bool failed_ = false;
  mutable std::string key_;
  mutable bool key_valid_ = false;
};

}  // namespace omnibus::grammar
