#include "kernels/quant_ref.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/quant_blocks.h"
#include "util/fp16.h"

namespace omnibus::quant_ref {
namespace {

inline float h2f(uint16_t h) { return fp16_to_fp32(h); }

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Low 4 bits of the 32 elements of a Q4/Q5 block: element j < 16 from the low
// nibble of qs[j], element j + 16 from the high nibble.
inline void unpack_nibbles(const uint8_t* qs, int8_t q[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t(qs[j] & 0xF);
    q[j + 16] = int8_t(qs[j] >> 4);
  }
}

inline void add_fifth_bit(const uint8_t* qh, int8_t q[32]) {
  const uint32_t h = load_u32(qh);
  for (int j = 0; j < 32; ++j) q[j] = int8_t(q[j] | (((h >> j) & 1) << 4));
}

// sum_j q[j] * a[j] over n elements.
inline int32_t dot_i8(const int8_t* q, const int8_t* a, int n) {
  int32_t s = 0;
  for (int j = 0; j < n; ++j) s += int32_t(q[j]) * int32_t(a[j]);
  return s;
}

// (amax, value with that |.|, first occurrence) over n floats.
inline void abs_max(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (*amax < std::fabs(x[j])) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}

inline void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

// q[j] -> 4-bit nibbles (+ fifth bit into qh when qh != nullptr).
inline void pack_q(const uint8_t q[32], uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    h |= uint32_t((q[j] >> 4) & 1) << j;
    h |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  if (qh != nullptr) store_u32(qh, h);
}

// The 32 int8 values of a Q8_0 / Q8_1 block.
template <typename Block>
void unpack_q8(const void* block, int8_t* q) {
  std::memcpy(q, static_cast<const Block*>(block)->qs, kQK);
}

// Blocks with a min (Q4_1, Q5_1: x = d * q + m), a fifth bit (Q5_0, Q5_1) or
// an activation sum (Q8_1).
template <typename Block>
constexpr bool kHasMin = requires(Block b) {
  b.m;
};
template <typename Block>
constexpr bool kHasHighBit = requires(Block b) {
  b.qh;
};
template <typename Block>
constexpr bool kHasSum = requires(Block b) {
  b.s;
};

// The 32-element formats: x = d * q (+ m).
template <typename Block, void (*Unpack)(const void*, int8_t*)>
void to_float_32(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const Block*>(x);
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    Unpack(&b[i], q);
    const float d = h2f(b[i].d);
    if constexpr (kHasMin<Block>) {
      const float m = h2f(b[i].m);
      for (int j = 0; j < 32; ++j) y[j] = float(q[j]) * d + m;
    } else {
      for (int j = 0; j < 32; ++j) y[j] = float(q[j]) * d;
    }
  }
}

// K-quant super-blocks: each block's 256 quants q unpacked, then
// scale(block, q, y) writes its 256 floats.
template <typename Block, void (*Unpack)(const void*, int8_t*), typename ScaleFn>
void to_float_k(const void* x, float* y, int64_t n, ScaleFn scale) {
  const auto* b = static_cast<const Block*>(x);
  int8_t q[256];
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    Unpack(&b[i], q);
    scale(b[i], q, y);
  }
}

// Q4_K / Q5_K: 8 sub-blocks of 32, x = d * sc * q - dmin * m.
template <typename Block, void (*Unpack)(const void*, int8_t*)>
void to_float_k4(const void* x, float* y, int64_t n) {
  to_float_k<Block, Unpack>(x, y, n, [](const Block& b, const int8_t* q, float* out) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      get_scale_min_k4(s, b.scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      for (int l = 0; l < 32; ++l) out[32 * s + l] = d1 * float(q[32 * s + l]) - m1;
    }
  });
}

// Q4_0 / Q5_0 (kLevels 16 / 32): d = max / -(kLevels / 2), the value of
// largest magnitude maps to level 0; q = x / d + kLevels / 2, rounded.
// Q4_1 / Q5_1: d = (max - min) / (kLevels - 1), m = min; q = (x - m) / d, rounded.
template <typename Block, int kLevels>
void from_float_32(const float* x, void* y, int64_t n) {
  auto* b = static_cast<Block*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[32];
    if constexpr (kHasMin<Block>) {
      float mn, mx;
      min_max(x, kQK, &mn, &mx);
      const float d = (mx - mn) / (kLevels - 1);
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      b[i].d = fp32_to_fp16(d);
      b[i].m = fp32_to_fp16(mn);
      for (int j = 0; j < 32; ++j) {
        q[j] = uint8_t(clamp_int(int((x[j] - mn) * id + 0.5f), 0, kLevels - 1));
      }
    } else {
      float amax, max;
      abs_max(x, kQK, &amax, &max);
      const float d = max / -(kLevels / 2);
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      b[i].d = fp32_to_fp16(d);
      for (int j = 0; j < 32; ++j) {
        q[j] = uint8_t(clamp_int(int(x[j] * id + (kLevels / 2 + 0.5f)), 0, kLevels - 1));
      }
    }
    if constexpr (kHasHighBit<Block>) {
      pack_q(q, b[i].qs, b[i].qh);
    } else {
      pack_q(q, b[i].qs, nullptr);
    }
  }
}

// Q8_0 / Q8_1: d = amax / 127, q = round(x / d); Q8_1 also s = d * sum(q).
template <typename Block>
void from_float_q8(const float* x, void* y, int64_t n) {
  auto* b = static_cast<Block*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b[i].qs[j] = int8_t(std::round(x[j] * id));
      sum += b[i].qs[j];
    }
    if constexpr (kHasSum<Block>) b[i].s = fp32_to_fp16(float(sum) * d);
  }
}

}  // namespace

// ---------------------------------------------------------------- unpacking

void unpack_q4_0(const void* block, int8_t q[32]) {
  const auto* b = static_cast<const BlockQ4_0*>(block);
  unpack_nibbles(b->qs, q);
  for (int j = 0; j < 32; ++j) q[j] = int8_t(q[j] - 8);
}

void unpack_q4_1(const void* block, int8_t q[32]) {
  unpack_nibbles(static_cast<const BlockQ4_1*>(block)->qs, q);
}

void unpack_q5_0(const void* block, int8_t q[32]) {
  const auto* b = static_cast<const BlockQ5_0*>(block);
  unpack_nibbles(b->qs, q);
  add_fifth_bit(b->qh, q);
  for (int j = 0; j < 32; ++j) q[j] = int8_t(q[j] - 16);
}

void unpack_q5_1(const void* block, int8_t q[32]) {
  const auto* b = static_cast<const BlockQ5_1*>(block);
  unpack_nibbles(b->qs, q);
  add_fifth_bit(b->qh, q);
}

void unpack_q2_K(const void* block, int8_t q[256]) {
  const auto* b = static_cast<const BlockQ2_K*>(block);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, j = (e % 128) / 32, l = e % 32;
    q[e] = int8_t((b->qs[32 * half + l] >> (2 * j)) & 3);
  }
}

void unpack_q3_K(const void* block, int8_t q[256]) {
  const auto* b = static_cast<const BlockQ3_K*>(block);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = (b->qs[32 * half + l] >> (2 * j)) & 3;
    const bool high = (b->hmask[l] >> (4 * half + j)) & 1;
    q[e] = int8_t(low - (high ? 0 : 4));
  }
}

void unpack_q4_K(const void* block, int8_t q[256]) {
  const auto* b = static_cast<const BlockQ4_K*>(block);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = int8_t(b->qs[32 * c + l] & 0xF);
      q[64 * c + 32 + l] = int8_t(b->qs[32 * c + l] >> 4);
    }
  }
}

void unpack_q5_K(const void* block, int8_t q[256]) {
  const auto* b = static_cast<const BlockQ5_K*>(block);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int h0 = (b->qh[l] >> (2 * c)) & 1;
      const int h1 = (b->qh[l] >> (2 * c + 1)) & 1;
      q[64 * c + l] = int8_t((b->qs[32 * c + l] & 0xF) | (h0 << 4));
      q[64 * c + 32 + l] = int8_t((b->qs[32 * c + l] >> 4) | (h1 << 4));
    }
  }
}

void unpack_q6_K(const void* block, int8_t q[256]) {
  const auto* b = static_cast<const BlockQ6_K*>(block);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b->ql + 64 * half;
    const uint8_t* qh = b->qh + 32 * half;
    int8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = int8_t(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = int8_t(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

// ---------------------------------------------------------------- to_float

void to_float_f32(const void* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }

void to_float_f16(const void* x, float* y, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(h[i]);
}

void to_float_bf16(const void* x, float* y, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(x);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(h[i]);
}

void to_float_q4_0(const void* x, float* y, int64_t n) {
  to_float_32<BlockQ4_0, unpack_q4_0>(x, y, n);
}
void to_float_q4_1(const void* x, float* y, int64_t n) {
  to_float_32<BlockQ4_1, unpack_q4_1>(x, y, n);
}
void to_float_q5_0(const void* x, float* y, int64_t n) {
  to_float_32<BlockQ5_0, unpack_q5_0>(x, y, n);
}
void to_float_q5_1(const void* x, float* y, int64_t n) {
  to_float_32<BlockQ5_1, unpack_q5_1>(x, y, n);
}
void to_float_q8_0(const void* x, float* y, int64_t n) {
  to_float_32<BlockQ8_0, unpack_q8<BlockQ8_0>>(x, y, n);
}
void to_float_q8_1(const void* x, float* y, int64_t n) {
  to_float_32<BlockQ8_1, unpack_q8<BlockQ8_1>>(x, y, n);
}

void to_float_q2_K(const void* x, float* y, int64_t n) {
  to_float_k<BlockQ2_K, unpack_q2_K>(x, y, n, [](const BlockQ2_K& b, const int8_t* q, float* out) {
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int e = 0; e < 256; ++e) {
      const uint8_t sc = b.scales[e / 16];
      const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
      out[e] = dl * float(q[e]) - ml;
    }
  });
}

void to_float_q3_K(const void* x, float* y, int64_t n) {
  to_float_k<BlockQ3_K, unpack_q3_K>(x, y, n, [](const BlockQ3_K& b, const int8_t* q, float* out) {
    int8_t sc[16];
    get_scales_q3_K(b.scales, sc);
    const float d = h2f(b.d);
    for (int e = 0; e < 256; ++e) out[e] = (d * float(sc[e / 16])) * float(q[e]);
  });
}

void to_float_q4_K(const void* x, float* y, int64_t n) {
  to_float_k4<BlockQ4_K, unpack_q4_K>(x, y, n);
}
void to_float_q5_K(const void* x, float* y, int64_t n) {
  to_float_k4<BlockQ5_K, unpack_q5_K>(x, y, n);
}

void to_float_q6_K(const void* x, float* y, int64_t n) {
  to_float_k<BlockQ6_K, unpack_q6_K>(x, y, n, [](const BlockQ6_K& b, const int8_t* q, float* out) {
    const float d = h2f(b.d);
    for (int e = 0; e < 256; ++e) out[e] = d * float(b.scales[e / 16]) * float(q[e]);
  });
}

void to_float_q8_K(const void* x, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(x);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    for (int e = 0; e < 256; ++e) y[e] = b[i].d * float(b[i].qs[e]);
  }
}

// ---------------------------------------------------------------- from_float

void from_float_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }

void from_float_f16(const float* x, void* y, int64_t n) {
  auto* h = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(x[i]);
}

void from_float_bf16(const float* x, void* y, int64_t n) {
  auto* h = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(x[i]);
}

void from_float_q4_0(const float* x, void* y, int64_t n) { from_float_32<BlockQ4_0, 16>(x, y, n); }
void from_float_q4_1(const float* x, void* y, int64_t n) { from_float_32<BlockQ4_1, 16>(x, y, n); }
void from_float_q5_0(const float* x, void* y, int64_t n) { from_float_32<BlockQ5_0, 32>(x, y, n); }
void from_float_q5_1(const float* x, void* y, int64_t n) { from_float_32<BlockQ5_1, 32>(x, y, n); }
void from_float_q8_0(const float* x, void* y, int64_t n) { from_float_q8<BlockQ8_0>(x, y, n); }
void from_float_q8_1(const float* x, void* y, int64_t n) { from_float_q8<BlockQ8_1>(x, y, n); }

void from_float_q8_K(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float amax, max;
    abs_max(x, kQKK, &amax, &max);
    if (amax == 0.0f) {
      std::memset(&b[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) b[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b[i].qs[16 * g + j];
      b[i].bsums[g] = int16_t(sum);
    }
    b[i].d = 1 / iscale;
  }
}

// ---------------------------------------------------------------- vec_dot

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(y[i]);
  return float(s);
}

namespace {

// 16-bit float formats (f16, bf16), the sum in double.
template <float (*ToF32)(uint16_t)>
float vec_dot_half(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(ToF32(x[i])) * double(ToF32(y[i]));
  return float(s);
}

// 32-element weight formats: x = d * q against Q8_0, sum_b (d_w * d_a) * isum_b;
// x = d * q + m against Q8_1, sum_b (d_w * d_a) * isum_b + m_w * s_a.
template <typename Block, typename ActBlock, void (*Unpack)(const void*, int8_t*)>
float vec_dot_32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const ActBlock*>(a);
  float sum = 0.0f;
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    Unpack(&x[i], q);
    const int32_t isum = dot_i8(q, y[i].qs, kQK);
    if constexpr (std::is_same_v<ActBlock, BlockQ8_1>) {
      sum += (h2f(x[i].d) * h2f(y[i].d)) * float(isum) + h2f(x[i].m) * h2f(y[i].s);
    } else {
      sum += (h2f(x[i].d) * h2f(y[i].d)) * float(isum);
    }
  }
  return sum;
}

// K-quant super-block dots against Q8_K: sums(x[i], q, y[i], &msum) gives the
// scaled integer dot of the unpacked quants q (and, for formats with mins,
// msum); sum_sb d_w d_a isum (- dmin_w d_a msum).
template <typename Block, void (*Unpack)(const void*, int8_t*), typename SumsFn>
float vec_dot_k(int64_t n, const void* w, const void* a, SumsFn sums) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  int8_t q[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    Unpack(&x[i], q);
    int32_t msum = 0;
    const int32_t isum = sums(x[i], q, y[i], &msum);
    if constexpr (requires { x[i].dmin; }) {
      sum += (h2f(x[i].d) * y[i].d) * float(isum) - (h2f(x[i].dmin) * y[i].d) * float(msum);
    } else {
      sum += (h2f(x[i].d) * y[i].d) * float(isum);
    }
  }
  return sum;
}

// Q4_K / Q5_K: sum_j sc_j isum_j, msum = sum_j m_j asum_j over the 8 sub-blocks of 32.
template <typename Block, void (*Unpack)(const void*, int8_t*)>
float vec_dot_k4(int64_t n, const void* w, const void* a) {
  return vec_dot_k<Block, Unpack>(
      n, w, a, [](const Block& x, const int8_t* q, const BlockQ8_K& y, int32_t* msum) {
        int32_t isum = 0;
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          get_scale_min_k4(s, x.scales, &sc, &m);
          isum += int32_t(sc) * dot_i8(q + 32 * s, y.qs + 32 * s, 32);
          *msum += int32_t(m) * (y.bsums[2 * s] + y.bsums[2 * s + 1]);
        }
        return isum;
      });
}

}  // namespace

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  return vec_dot_half<fp16_to_fp32>(n, w, a);
}
float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  return vec_dot_half<bf16_to_fp32>(n, w, a);
}
float vec_dot_q4_0(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ4_0, BlockQ8_0, unpack_q4_0>(n, w, a);
}
float vec_dot_q5_0(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ5_0, BlockQ8_0, unpack_q5_0>(n, w, a);
}
float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ8_0, BlockQ8_0, unpack_q8<BlockQ8_0>>(n, w, a);
}
float vec_dot_q4_1(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ4_1, BlockQ8_1, unpack_q4_1>(n, w, a);
}
float vec_dot_q5_1(int64_t n, const void* w, const void* a) {
  return vec_dot_32<BlockQ5_1, BlockQ8_1, unpack_q5_1>(n, w, a);
}
float vec_dot_q4_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k4<BlockQ4_K, unpack_q4_K>(n, w, a);
}
float vec_dot_q5_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k4<BlockQ5_K, unpack_q5_K>(n, w, a);
}

// Q2_K: 16 sub-blocks of 16, scale in the low nibble, min in the high one.
float vec_dot_q2_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k<BlockQ2_K, unpack_q2_K>(
      n, w, a, [](const BlockQ2_K& x, const int8_t* q, const BlockQ8_K& y, int32_t* msum) {
        int32_t isum = 0;
        for (int s = 0; s < 16; ++s) {
          isum += int32_t(x.scales[s] & 0xF) * dot_i8(q + 16 * s, y.qs + 16 * s, 16);
          *msum += int32_t(x.scales[s] >> 4) * y.bsums[s];
        }
        return isum;
      });
}

float vec_dot_q3_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k<BlockQ3_K, unpack_q3_K>(
      n, w, a, [](const BlockQ3_K& x, const int8_t* q, const BlockQ8_K& y, int32_t*) {
        int8_t sc[16];
        get_scales_q3_K(x.scales, sc);
        int32_t isum = 0;
        for (int s = 0; s < 16; ++s) isum += int32_t(sc[s]) * dot_i8(q + 16 * s, y.qs + 16 * s, 16);
        return isum;
      });
}

float vec_dot_q6_K(int64_t n, const void* w, const void* a) {
  return vec_dot_k<BlockQ6_K, unpack_q6_K>(
      n, w, a, [](const BlockQ6_K& x, const int8_t* q, const BlockQ8_K& y, int32_t*) {
        int32_t isum = 0;
        for (int s = 0; s < 16; ++s)
          isum += int32_t(x.scales[s]) * dot_i8(q + 16 * s, y.qs + 16 * s, 16);
        return isum;
      });
}

}  // namespace omnibus::quant_ref
