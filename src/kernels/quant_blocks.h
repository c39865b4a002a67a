// Block structs of the ggml/GGUF quantized formats, bit-exact with the files
// llama.cpp writes (docs/quant-formats.md has a table of each). A row of a
// quantized type is its blocks back to back; blocks are not aligned in files,
// so kernels read them with unaligned loads.
//
// fp16 fields are raw IEEE half bits (util/fp16.h converts them).
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>

namespace omnibus {

inline constexpr int kQK = 32;    // elements per block of the 32-element formats
inline constexpr int kQKK = 256;  // elements per super-block of the K-quants

// Q4_0: x = d * (q - 8), q in [0, 15]. qs[j]: element j in the low nibble,
// element j + 16 in the high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
// Q4_1: x = d * q + m, q in [0, 15]; nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
// Q5_0: x = d * (q - 16), q in [0, 31]; low 4 bits as Q4_0, bit 4 of
// element j is bit j of qh (little-endian uint32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q5_1: x = d * q + m, q in [0, 31]; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// Q8_0: x = d * q, q in [-127, 127].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
// Q8_1: x = d * q; s = fp16(d * sum(q)), the activation side of Q4_1/Q5_1.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};

// Q2_K: 16 sub-blocks of 16; scales[i] = scale (low 4 bits) | min (high 4);
// x = d * sc * q - dmin * m, q 2 bits. qs: 2 x 128 elements, each 32 bytes
// x 4 bit-pairs (shift 0, 2, 4, 6 -> consecutive groups of 32 elements).
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};
// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales (offset 32) packed in
// 12 bytes; q = 2 low bits (qs, as Q2_K) - 4 unless the hmask bit is set.
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};
// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min (get_scale_min_k4
// packing in `scales`); x = d * sc * q - dmin * m. qs: 4 chunks of 32 bytes;
// chunk c holds sub-block 2c in the low nibbles, 2c + 1 in the high ones.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
// Q5_K: Q4_K plus a fifth bit: bit (2c) / (2c + 1) of qh[l] for element l of
// sub-block 2c / 2c + 1.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// Q6_K: 16 sub-blocks of 16 with int8 scales; x = d * sc * (q - 32), q 6 bits:
// low 4 in ql, high 2 in qh (see to_float_q6_K for the interleave).
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
// Q8_K: activation side of the K-quants. d is f32; bsums[j] = sum of qs[16j..16j+16).
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 16 signed scales (-32..31) of a Q3_K block.
inline void get_scales_q3_K(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace omnibus
