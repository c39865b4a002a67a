// AVX2 + FMA + F16C kernels for the dtype table (see dtype.h for the
// contracts, quant_ref.h for the definitions they are tested against).
//
// REQUIRES: cpu_features().use_avx2(); only dtype.cc and matmul.cc call these,
// after that check. The activation quantizers are bit-exact with quant_ref;
// the dot products match it up to float summation order (8 lanes, then a
// fixed horizontal sum; per format the same operations as the matmul's).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace omnibus::quant_avx2 {

void to_float_f16(const void* x, float* y, int64_t n);
void to_float_bf16(const void* x, float* y, int64_t n);
void from_float_bf16(const float* x, void* y, int64_t n);
void from_float_f16(const float* x, void* y, int64_t n);
void from_float_q8_0(const float* x, void* y, int64_t n);
void from_float_q8_1(const float* x, void* y, int64_t n);
void from_float_q8_K(const float* x, void* y, int64_t n);

float vec_dot_f32(int64_t n, const void* w, const void* a);
float vec_dot_f16(int64_t n, const void* w, const void* a);
float vec_dot_bf16(int64_t n, const void* w, const void* a);
float vec_dot_q4_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_1(int64_t n, const void* w, const void* a);
float vec_dot_q5_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_1(int64_t n, const void* w, const void* a);
float vec_dot_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_q2_K(int64_t n, const void* w, const void* a);
float vec_dot_q3_K(int64_t n, const void* w, const void* a);
float vec_dot_q4_K(int64_t n, const void* w, const void* a);
float vec_dot_q5_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K(int64_t n, const void* w, const void* a);

}  // namespace omnibus::quant_avx2
