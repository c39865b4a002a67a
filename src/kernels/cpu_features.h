// What the CPU we run on can do, read once with cpuid. Kernels are chosen at
// run time from this, so one binary runs everywhere; OMNIBUS_NO_SIMD=1 in the
// environment forces the scalar reference kernels (for tests and comparisons).
//
// Thread-safety: computed once (thread-safe static), then immutable.
#pragma once

namespace omnibus {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx_vnni = false;
  // true when avx2 && fma && f16c and SIMD is not disabled by the environment
  bool use_avx2() const { return avx2 && fma && f16c && !simd_disabled; }
  bool simd_disabled = false;
};

const CpuFeatures& cpu_features();

}  // namespace omnibus
