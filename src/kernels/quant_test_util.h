// Test helpers (header-only, used by quant_test.cc, matmul_test.cc and
// matmul_bench.cc): random rows of any dtype with valid scale fields.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/quant_blocks.h"
#include "util/fp16.h"

namespace omnibus::quant_testing {

// Offsets of a block's fp16 scale fields (d first, then m / dmin if any).
inline std::vector<size_t> scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0:
      return {offsetof(BlockQ4_0, d)};
    case DType::Q5_0:
      return {offsetof(BlockQ5_0, d)};
    case DType::Q8_0:
      return {offsetof(BlockQ8_0, d)};
    case DType::Q4_1:
      return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case DType::Q5_1:
      return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case DType::Q2_K:
      return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case DType::Q3_K:
      return {offsetof(BlockQ3_K, d)};
    case DType::Q4_K:
      return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case DType::Q5_K:
      return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case DType::Q6_K:
      return {offsetof(BlockQ6_K, d)};
    default:
      return {};
  }
}

// n_rows rows of n elements of type t: random quants, scales of magnitude ~scale.
inline std::vector<uint8_t> random_rows(DType t, int64_t n_rows, int64_t n, std::mt19937& rng,
                                        float scale = 0.01f) {
  const DTypeTraits& tr = dtype_traits_ref(t);
  std::vector<uint8_t> out(dtype_row_size(t, n) * size_t(n_rows));
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  if (!tr.is_quantized) {
    std::vector<float> f(size_t(n * n_rows));
    for (float& v : f) v = uni(rng);
    tr.from_float(f.data(), out.data(), n * n_rows);
    return out;
  }
  for (uint8_t& b : out) b = uint8_t(rng());
  const auto offsets = scale_offsets(t);
  for (size_t blk = 0; blk < out.size() / tr.type_size; ++blk) {
    for (size_t off : offsets) {
      const uint16_t h =
          fp32_to_fp16(scale * (0.5f + std::fabs(uni(rng))) * (uni(rng) < 0 ? -1 : 1));
      std::memcpy(&out[blk * tr.type_size + off], &h, 2);
    }
  }
  return out;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> uni(lo, hi);
  std::vector<float> f(n);
  for (float& v : f) v = uni(rng);
  return f;
}

// The weight types with a dot product.
inline std::vector<DType> weight_types() {
  return {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
          DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
}

}  // namespace omnibus::quant_testing
