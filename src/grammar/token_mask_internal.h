// Test hook for token_mask.cc (internal to grammar/).
#pragma once

#include <atomic>
#include <cstddef>

namespace omnibus::grammar::detail {

// How many distinct states one walk interns (memoized transitions); states
// beyond it are advanced directly. Tests lower it to cover that path.
extern std::atomic<size_t> g_walk_max_interned;

}  // namespace omnibus::grammar::detail
