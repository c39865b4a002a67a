// What the CPU we run on can do, read once with cpuid, and the ISA tier the
// kernels run at. Kernels are chosen at run time from this, so one binary
// runs everywhere (docs/performance.md, "ISA tiers").
//
// Tiers, lowest first; a tier runs where the CPU has everything it names:
//   scalar     the reference kernels (OMNIBUS_NO_SIMD=1 or OMNIBUS_ISA=scalar)
//   avx2       AVX2 + FMA + F16C: int8 products by maddubs + madd
//   avx-vnni   avx2 + AVX-VNNI (VEX vpdpbusd, 256-bit): Alder Lake and later
//              client parts, Sapphire Rapids, Zen 5
//   avx512     avx2 + AVX-512 F/BW/VL/DQ + AVX512_VNNI (EVEX vpdpbusd, 32
//              vector registers): Ice Lake, Sapphire Rapids, Zen 4/5.
//              AVX-512 without VNNI (Skylake-SP) runs avx2.
//   amx        avx512 + AMX-TILE + AMX-INT8, with the OS's permission for
//              the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+):
//              Sapphire Rapids and later Xeons. The many-token Q4_K / Q5_K
//              matmuls run on the tile unit; everything else as avx512.
// The integer kernels of every tier keep exact int32 sums in the same order,
// so the tiers give bitwise the same matmul results (kernels/matmul_test.cc).
//
// OMNIBUS_ISA=<tier> caps the tier (A/B runs, tests): the highest tier the
// CPU supports that is not above the cap. An unknown name is a fatal error at
// start-up, naming the tiers.
//
// Thread-safety: cpu_features() is computed once (thread-safe static), then
// immutable. isa() is an atomic read; set_isa_for_testing() may only be
// called while no kernel runs (a test's setup).
#pragma once

#include <optional>
#include <string_view>

namespace omnibus {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3, kAmx = 4 };
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512,
                                   Isa::kAmx};

const char* isa_name(Isa isa);  // "scalar", "avx2", "avx-vnni", "avx512", "amx"
std::optional<Isa> parse_isa(std::string_view name);

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx_vnni = false;
  bool amx_int8 = false;  // AMX-TILE + AMX-INT8 usable: the CPU has them, the OS granted the tiles
  bool simd_disabled = false;  // OMNIBUS_NO_SIMD set
  // The vendor (cpuid leaf 0) is "AuthenticAMD": a tuning input only (where
  // measurements on AMD and Intel cores disagree on the faster kernel), never
  // a correctness one.
  bool amd = false;
  // Whether this CPU can run `tier` (ignoring any cap).
  bool supports(Isa tier) const;
  // The highest tier this CPU supports, and the tier chosen at start-up (it,
  // capped by OMNIBUS_ISA / OMNIBUS_NO_SIMD).
  Isa best = Isa::kScalar;
  Isa chosen = Isa::kScalar;
  // true when the chosen tier is at least avx2 (every SIMD kernel's floor)
  bool use_avx2() const { return chosen >= Isa::kAvx2; }
};

const CpuFeatures& cpu_features();

// The tier the integer matmul kernels run at now: cpu_features().chosen
// unless a test set another.
Isa isa();

// Tests only: run the kernels at `tier` (REQUIRES: supports(tier) and tier >=
// avx2 where cpu_features().use_avx2(), since the tables of the other
// kernels were chosen at start-up). Returns the previous tier.
Isa set_isa_for_testing(Isa tier);

}  // namespace omnibus
