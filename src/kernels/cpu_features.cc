#include "kernels/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace omnibus {

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
    // GCC 12's __builtin_cpu_supports has no "f16c"; every AVX2 CPU shipped
    // so far has it, but read it from cpuid leaf 1, ECX bit 29, to be sure.
    unsigned eax = 1, ebx = 0, ecx = 0, edx = 0;
    __asm__ volatile("cpuid" : "+a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx));
    f.f16c = (ecx >> 29) & 1;
#endif
    const char* env = std::getenv("OMNIBUS_NO_SIMD");
    f.simd_disabled = env != nullptr && std::strcmp(env, "") != 0 && std::strcmp(env, "0") != 0;
    return f;
  }();
  return features;
}

}  // namespace omnibus
