// Test helper (header-only, used by matmul_test.cc and matmul_act_test.cc):
// the ISA tiers above avx2 that this CPU runs, for tests that hold each of
// them bitwise to the avx2 tier.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu_features.h"

namespace omnibus::isa_testing {

// Appends to *tiers the tiers above avx2 this CPU supports; returns why
// there is nothing to compare (the skip message) when it appends none, else
// "". tests/skips_allowed.txt lists the tests that may skip for it.
inline std::string tiers_above_avx2(std::vector<Isa>* tiers) {
  const CpuFeatures& f = cpu_features();
  if (!f.use_avx2()) return std::string("tier ") + isa_name(f.chosen) + ": no SIMD tier to compare";
  for (Isa tier : kAllIsas) {
    if (tier > Isa::kAvx2 && f.supports(tier)) tiers->push_back(tier);
  }
  if (tiers->empty())
    return std::string("this CPU runs only the avx2 tier (best: ") + isa_name(f.best) + ")";
  return "";
}

}  // namespace omnibus::isa_testing
