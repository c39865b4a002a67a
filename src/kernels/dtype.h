// The dtype table: one row of traits per tensor element type that a GGUF file
// may hold. Every kernel that depends on a weight's format goes through this
// table instead of a switch of its own.
//
// Block layouts are the GGUF/ggml ones (bit-exact with files written by
// llama.cpp); docs/quant-formats.md describes each. A "row" of n elements of a
// quantized type is n / block_size blocks laid out back to back.
//
// Dot products pair a weight row with an activation row that has been
// quantized once per step to the weight type's `vec_dot_type` (Q8_0 for
// Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, F32/F16/BF16 for
// the float types) — the same pairing llama.cpp uses, so results agree with it
// closely.
//
// Two tables exist: `dtype_traits_ref()` holds the portable scalar reference
// kernels (readable, the definition of correct), `dtype_traits()` the fastest
// kernels this CPU supports (chosen once, at first use, from cpu_features()).
// Tests hold the two together.
//
// Thread-safety: the tables are immutable after first use; all functions are
// pure and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gguf/gguf_format.h"

namespace omnibus {

// DType (the element types, as ggml type ids) and each type's block geometry
// are gguf's (gguf/gguf_format.h); this table adds the kernels.

// y[0..n) = dequantize(x), n a multiple of block_size.
using ToFloatFn = void (*)(const void* x, float* y, int64_t n);
// y = quantize(x[0..n)), n a multiple of block_size.
using FromFloatFn = void (*)(const float* x, void* y, int64_t n);
// returns sum_i w[i] * a[i] over n elements; w in this type, a in vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

struct DTypeTraits {
  DType type;
  const char* name;    // "q4_1", as ggml names it (gguf_block_geometry)
  int64_t block_size;  // elements per block (1 for float types); from gguf
  size_t type_size;    // bytes per block; from gguf
  bool is_quantized;
  DType vec_dot_type;      // activation format for vec_dot
  ToFloatFn to_float;      // null if this type cannot be dequantized
  FromFloatFn from_float;  // null if omnibus cannot quantize to this type
  VecDotFn vec_dot;        // null if the type is not supported as a weight
};

// REQUIRES: is_known_dtype(t). Fastest kernels this CPU supports.
const DTypeTraits& dtype_traits(DType t);
// REQUIRES: is_known_dtype(t). Portable scalar reference kernels.
const DTypeTraits& dtype_traits_ref(DType t);

bool is_known_dtype(uint32_t id);
std::string_view dtype_name(DType t);

// Bytes of a row of n elements; REQUIRES n % block_size == 0.
size_t dtype_row_size(DType t, int64_t n);

}  // namespace omnibus
