// The ISA tier: names, the OMNIBUS_ISA cap, and which tier this run of the
// kernel tests exercises (ctest runs kernels_tests once per tier; a run whose
// tier the CPU lacks says so and skips).
#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace omnibus {
namespace {

TEST(Isa, NamesRoundTrip) {
  for (Isa tier : kAllIsas) EXPECT_EQ(parse_isa(isa_name(tier)), tier);
  EXPECT_FALSE(parse_isa("avx1024").has_value());
  EXPECT_FALSE(parse_isa("").has_value());
}

TEST(Isa, ChosenTierIsSupportedAndWithinTheCap) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(f.supports(f.chosen));
  EXPECT_TRUE(f.supports(f.best));
  EXPECT_LE(f.chosen, f.best);
  EXPECT_EQ(isa(), f.chosen);
  const char* env = std::getenv("OMNIBUS_ISA");
  if (env != nullptr && *env != '\0') {
    EXPECT_LE(f.chosen, *parse_isa(env));
  }
  // tiers are nested: a CPU that runs one runs every lower one but avx-vnni
  // (AVX-512 VNNI parts such as Zen 4 lack the VEX form)
  for (Isa tier : kAllIsas) {
    if (!f.supports(tier)) continue;
    for (Isa lower : kAllIsas) {
      if (lower < tier && lower != Isa::kAvxVnni) {
        EXPECT_TRUE(f.supports(lower)) << isa_name(lower);
      }
    }
  }
}

// The tier this process runs the kernels at, named in the test output.
TEST(Isa, RequestedTierRuns) {
  const CpuFeatures& f = cpu_features();
  const char* env = std::getenv("OMNIBUS_ISA");
  const std::string requested = env != nullptr ? env : "";
  if (!requested.empty() && !f.supports(*parse_isa(requested))) {
    GTEST_SKIP() << "this CPU has no " << requested << " tier (best: " << isa_name(f.best)
                 << "); the kernels ran at " << isa_name(f.chosen);
  }
  std::printf("kernels run at tier %s (CPU best: %s)\n", isa_name(f.chosen), isa_name(f.best));
  if (!requested.empty()) {
    EXPECT_EQ(f.chosen, *parse_isa(requested));
  }
}

}  // namespace
}  // namespace omnibus
