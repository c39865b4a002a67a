#include "kernels/matmul_packed_tuning.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu_features.h"

namespace omnibus::matmul_packed {
namespace {

// -1: not chosen yet (the first call chooses; a race stores the same value
// twice).
std::atomic<int> g_one_token_pairs{-1};

}  // namespace

// The single-group kernels on AMD cores, the wide ones elsewhere. EPYC Zen 5
// and Zen 4: single groups 27-30 -> 36-40 GB/s a core (Q4_K, Q4_0, Q4_1,
// Q5_0, Q5_K at 4096 x 14336), the 8B Q4_K_M decode +12-37% (rounds (l),
// (n)). Sapphire Rapids Xeon, with the pair kernels' prefetches restored
// (round (q)): the 8B Q4_K_M decode 7.0 tok/s with pairs (102-103% of the
// read probe) against 6.4 with single groups.
bool one_token_pairs() {
  int v = g_one_token_pairs.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("OMNIBUS_ONE_TOKEN_PAIRS");
    v = env != nullptr && *env != '\0' ? std::strcmp(env, "0") != 0 : !cpu_features().amd;
    g_one_token_pairs.store(v, std::memory_order_relaxed);
  }
  return v != 0;
}

bool set_one_token_pairs_for_testing(bool pairs) {
  const bool prev = one_token_pairs();
  g_one_token_pairs.store(pairs ? 1 : 0, std::memory_order_relaxed);
  return prev;
}

}  // namespace omnibus::matmul_packed
