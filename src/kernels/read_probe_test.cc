// ReadProbe (read_probe.h): the sum every tier computes, and a measurement.
#include "kernels/read_probe.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu_features.h"

namespace omnibus {
namespace {

// read_probe_sum (AVX2 where the CPU has it) against the scalar loop, on
// random bytes at several lengths (multiples of 128, as the contract says)
// and against a hand-computed sum.
TEST(ReadProbe, SumEqualsScalarAndHandSum) {
  constexpr size_t kMax = 128 * 37;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, kMax));
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < kMax; i += 8) {
    const uint64_t w = rng();
    std::memcpy(p + i, &w, 8);
  }
  for (size_t n : {size_t(0), size_t(128), size_t(256), size_t(128 * 5), kMax}) {
    uint64_t hand = 0;
    for (size_t i = 0; i < n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      hand += w;
    }
    EXPECT_EQ(read_probe_sum_scalar(p, n), hand) << n;
    EXPECT_EQ(read_probe_sum(p, n), hand)
        << n << " bytes, tier " << isa_name(cpu_features().chosen);
    EXPECT_EQ(read_probe_sum(p, n, ReadShape::kPaced), hand)
        << n << " bytes, paced, tier " << isa_name(cpu_features().chosen);
    EXPECT_EQ(read_probe_sum(p, n, ReadShape::kPrefetched), hand)
        << n << " bytes, prefetched, tier " << isa_name(cpu_features().chosen);
    for (size_t ahead : {size_t(0), size_t(256), size_t(4096)}) {
      for (bool into_l2 : {false, true}) {
        EXPECT_EQ(read_probe_sum_prefetching(p, n, ahead, into_l2), hand)
            << n << " bytes, " << ahead << " ahead, tier " << isa_name(cpu_features().chosen);
      }
    }
  }
  std::free(p);
}

// A small probe measures a positive rate with 1 and 3 threads (measure checks
// every slice's sum itself, so a thread that read the wrong bytes aborts).
TEST(ReadProbe, MeasuresAPositiveRate) {
  ReadProbe probe(size_t(8) << 20);
  EXPECT_EQ(probe.bytes(), size_t(8) << 20);
  EXPECT_GT(probe.measure(1, 2), 0.0);
  EXPECT_GT(probe.measure(3, 1), 0.0);
}

// read_spans reads each thread's whole-128-byte share of every span: a
// pass's bytes are exactly those, whatever the span sizes and threads.
TEST(ReadProbe, ReadSpansCountsEachThreadsShare) {
  constexpr size_t kA = 128 * 40 + 64, kB = 128 * 7;
  auto* a = static_cast<uint8_t*>(std::aligned_alloc(64, kA));
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(64, 128 * 8));
  std::memset(a, 1, kA);
  std::memset(b, 2, kB);
  const std::vector<std::span<const uint8_t>> spans = {{a, kA}, {b, kB}};
  size_t bytes = 0;
  EXPECT_GT(read_spans(spans, 1, 1, &bytes), 0.0);
  EXPECT_EQ(bytes, 128 * 40 + kB);
  EXPECT_GT(read_spans(spans, 3, 2, &bytes), 0.0);
  EXPECT_EQ(bytes, 3 * (128 * 13) + 3 * (128 * 2));  // 40 / 3 and 7 / 3 steps a thread
  std::free(a);
  std::free(b);
}

}  // namespace
}  // namespace omnibus
