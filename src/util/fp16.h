// Scalar conversions between float and the 16-bit float formats stored in GGUF
// files (IEEE half, bfloat16). Exact (round-to-nearest-even on the way down),
// no CPU features needed; vectorised kernels use F16C where available and must
// agree with these bit for bit.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace omnibus {

inline float fp32_from_bits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline uint32_t fp32_to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
}

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return fp32_from_bits(sign);
    // subnormal: normalise
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return fp32_from_bits(sign | uint32_t(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return fp32_from_bits(sign | 0x7f800000u | mant << 13);
  return fp32_from_bits(sign | (exp + 127 - 15) << 23 | mant << 13);
}

inline uint16_t fp32_to_fp16(float f) {
  uint32_t x = fp32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000u) {  // inf or nan
    return uint16_t(sign | 0x7c00 | (x > 0x7f800000u ? 0x200 : 0));
  }
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (x < 0x38800000u) {                                 // result is subnormal or zero
    if (x < 0x33000000u) return uint16_t(sign);
    const uint32_t e = x >> 23;
    uint32_t mant = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((x >> 13) - ((127 - 15) << 10));
  const uint32_t rem = x & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits(uint32_t(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = fp32_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

}  // namespace omnibus
