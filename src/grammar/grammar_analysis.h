// Whole-grammar analyses the parser runs before it accepts a Grammar.
//
//   nullable_rules():      which rules match the empty string (worklist, linear).
//   find_left_recursion(): a rule on a cycle of references reachable without
//                          consuming a byte where some step of the cycle is NOT
//                          in last position (it would push a frame each time
//                          round: an unbounded stack). Cycles made only of
//                          last-position references are epsilon loops, which
//                          the matcher handles (grammar.h). Iterative: never
//                          recurses on the grammar's depth.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace omnibus::grammar {

// REQUIRES: every kRule element names a rule in g.rules.
std::vector<bool> nullable_rules(const Grammar& g);

// Returns the index of a left-recursive rule, or -1.
int32_t find_left_recursion(const Grammar& g, const std::vector<bool>& nullable);

}  // namespace omnibus::grammar
