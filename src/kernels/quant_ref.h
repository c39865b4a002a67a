// Portable scalar reference kernels for every row of the dtype table: the
// definition of correct that SIMD kernels are tested against. Written for
// reading, not speed. Rounding of the quantizers follows ggml's reference
// quantize_row_*_ref so that numerics track llama.cpp.
//
// Conventions (see dtype.h): n is a multiple of the type's block size; vec_dot
// pairs a weight row with an activation row in the weight's vec_dot_type.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace omnibus::quant_ref {

void to_float_f32(const void* x, float* y, int64_t n);
void to_float_f16(const void* x, float* y, int64_t n);
void to_float_bf16(const void* x, float* y, int64_t n);
void to_float_q4_0(const void* x, float* y, int64_t n);
void to_float_q4_1(const void* x, float* y, int64_t n);
void to_float_q5_0(const void* x, float* y, int64_t n);
void to_float_q5_1(const void* x, float* y, int64_t n);
void to_float_q8_0(const void* x, float* y, int64_t n);
void to_float_q8_1(const void* x, float* y, int64_t n);
void to_float_q2_K(const void* x, float* y, int64_t n);
void to_float_q3_K(const void* x, float* y, int64_t n);
void to_float_q4_K(const void* x, float* y, int64_t n);
void to_float_q5_K(const void* x, float* y, int64_t n);
void to_float_q6_K(const void* x, float* y, int64_t n);
void to_float_q8_K(const void* x, float* y, int64_t n);

void from_float_f32(const float* x, void* y, int64_t n);
void from_float_f16(const float* x, void* y, int64_t n);
void from_float_bf16(const float* x, void* y, int64_t n);
void from_float_q4_0(const float* x, void* y, int64_t n);
void from_float_q4_1(const float* x, void* y, int64_t n);
void from_float_q5_0(const float* x, void* y, int64_t n);
void from_float_q5_1(const float* x, void* y, int64_t n);
void from_float_q8_0(const float* x, void* y, int64_t n);
void from_float_q8_1(const float* x, void* y, int64_t n);
void from_float_q8_K(const float* x, void* y, int64_t n);

float vec_dot_f32(int64_t n, const void* w, const void* a);   // a: f32
float vec_dot_f16(int64_t n, const void* w, const void* a);   // a: f16
float vec_dot_bf16(int64_t n, const void* w, const void* a);  // a: bf16
float vec_dot_q4_0(int64_t n, const void* w, const void* a);  // a: q8_0
float vec_dot_q4_1(int64_t n, const void* w, const void* a);  // a: q8_1
float vec_dot_q5_0(int64_t n, const void* w, const void* a);  // a: q8_0
float vec_dot_q5_1(int64_t n, const void* w, const void* a);  // a: q8_1
float vec_dot_q8_0(int64_t n, const void* w, const void* a);  // a: q8_0
float vec_dot_q2_K(int64_t n, const void* w, const void* a);  // a: q8_K
float vec_dot_q3_K(int64_t n, const void* w, const void* a);  // a: q8_K
float vec_dot_q4_K(int64_t n, const void* w, const void* a);  // a: q8_K
float vec_dot_q5_K(int64_t n, const void* w, const void* a);  // a: q8_K
float vec_dot_q6_K(int64_t n, const void* w, const void* a);  // a: q8_K

// Unpacks one 32-element block to its integer quants (offset removed for the
// symmetric formats: Q4_0 -> q - 8, Q5_0 -> q - 16). Shared by the reference
// dot products and to_float so that both read the bits the same way.
void unpack_q4_0(const void* block, int8_t q[32]);
void unpack_q4_1(const void* block, int8_t q[32]);
void unpack_q5_0(const void* block, int8_t q[32]);
void unpack_q5_1(const void* block, int8_t q[32]);
// One 256-element super-block to integer quants (Q6_K: q - 32; Q3_K: signed).
void unpack_q2_K(const void* block, int8_t q[256]);
void unpack_q3_K(const void* block, int8_t q[256]);
void unpack_q4_K(const void* block, int8_t q[256]);
void unpack_q5_K(const void* block, int8_t q[256]);
void unpack_q6_K(const void* block, int8_t q[256]);

// ggml's rounding helper for the K-quant activations: round to nearest, ties
// to even, via the 1.5 * 2^23 trick. REQUIRES |x| <= 4194303.
inline int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  __builtin_memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace omnibus::quant_ref
