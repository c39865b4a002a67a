#include "kernels/cpu_features.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "util/check.h"

namespace omnibus {
namespace {

#if defined(__x86_64__) || defined(__i386__)
struct CpuidRegs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  r.eax = leaf;
  r.ecx = subleaf;
  __asm__ volatile("cpuid" : "+a"(r.eax), "=b"(r.ebx), "+c"(r.ecx), "=d"(r.edx));
  return r;
}
#endif

bool env_set(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, "") != 0 && std::strcmp(env, "0") != 0;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
// Asks Linux for the AMX tile data state (XFEATURE_XTILEDATA, 18) for this
// process: without it the first tile instruction faults. Granted once for
// every thread of the process; fails on kernels before 5.16.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

std::atomic<int>& active_isa() {
  static std::atomic<int> tier{int(cpu_features().chosen)};
  return tier;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avx-vnni";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa tier : kAllIsas) {
    if (name == isa_name(tier)) return tier;
  }
  return std::nullopt;
}

bool CpuFeatures::supports(Isa tier) const {
  const bool base = avx2 && fma && f16c;
  switch (tier) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return base;
    case Isa::kAvxVnni:
      return base && avx_vnni;
    case Isa::kAvx512:
      return base && avx512f && avx512bw && avx512vl && avx512dq && avx512_vnni;
    case Isa::kAmx:
      return supports(Isa::kAvx512) && amx_int8;
  }
  return false;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512dq = __builtin_cpu_supports("avx512dq");
    f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
    // GCC 12's __builtin_cpu_supports has neither "f16c" nor "avxvnni" nor
    // "avx512bf16": read them from cpuid (leaf 1 ECX bit 29; leaf 7 subleaf 1
    // EAX bits 4 and 5). The OS-enabled state of the registers is implied by
    // the builtins above, which check XCR0.
    f.f16c = (cpuid(1, 0).ecx >> 29) & 1;
    f.amd = __builtin_cpu_is("amd");  // cpuid leaf 0's vendor "AuthenticAMD"
    if (cpuid(0, 0).eax >= 7) {
      const CpuidRegs l7s1 = cpuid(7, 1);
      f.avx_vnni = f.avx2 && ((l7s1.eax >> 4) & 1);
      f.avx512_bf16 = f.avx512f && ((l7s1.eax >> 5) & 1);
      // AMX-TILE and AMX-INT8: leaf 7 EDX bits 24 and 25; usable once the
      // OS enables the tile state in XCR0 (bits 17, 18) and grants it.
      const CpuidRegs l7 = cpuid(7, 0);
      const bool amx_cpu = ((l7.edx >> 24) & 1) && ((l7.edx >> 25) & 1);
      const bool osxsave = (cpuid(1, 0).ecx >> 27) & 1;
      if (amx_cpu && osxsave) {
        unsigned lo = 0, hi = 0;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        const bool tiles_enabled = ((lo >> 17) & 3) == 3;
#if defined(__linux__)
        f.amx_int8 = tiles_enabled && request_amx_permission();
#endif
      }
    }
#endif
    f.simd_disabled = env_set("OMNIBUS_NO_SIMD");
    for (Isa tier : kAllIsas) {
      if (f.supports(tier)) f.best = tier;
    }
    Isa cap = f.simd_disabled ? Isa::kScalar : Isa::kAmx;
    if (const char* env = std::getenv("OMNIBUS_ISA"); env != nullptr && *env != '\0') {
      const std::optional<Isa> parsed = parse_isa(env);
      if (!parsed) {
        std::fprintf(stderr,
                     "OMNIBUS_ISA=%s: unknown tier (one of scalar, avx2, avx-vnni, avx512, amx)\n",
                     env);
        std::exit(2);
      }
      if (*parsed < cap) cap = *parsed;
    }
    f.chosen = Isa::kScalar;
    for (Isa tier : kAllIsas) {
      if (tier <= cap && f.supports(tier)) f.chosen = tier;
    }
    return f;
  }();
  return features;
}

Isa isa() { return Isa(active_isa().load(std::memory_order_relaxed)); }

Isa set_isa_for_testing(Isa tier) {
  const CpuFeatures& f = cpu_features();
  OMNIBUS_CHECK(f.supports(tier));
  OMNIBUS_CHECK(!f.use_avx2() || tier >= Isa::kAvx2);
  return Isa(active_isa().exchange(int(tier)));
}

}  // namespace omnibus
