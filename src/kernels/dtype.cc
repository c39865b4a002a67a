#include "kernels/dtype.h"

#include <array>

#include "kernels/cpu_features.h"
#include "kernels/quant_avx2.h"
#include "kernels/quant_blocks.h"
#include "kernels/quant_ref.h"
#include "util/check.h"

namespace omnibus {
namespace {

constexpr uint32_t kNumIds = 31;  // ids 0..30 (BF16 = 30)

struct Table {
  std::array<DTypeTraits, kNumIds> rows{};
  std::array<bool, kNumIds> known{};

  // One row: the geometry comes from gguf; `block_bytes` (the block struct's
  // size, quant_blocks.h) must agree with it.
  void add(DType type, size_t block_bytes, bool is_quantized, DType vec_dot_type,
           ToFloatFn to_float, FromFloatFn from_float, VecDotFn vec_dot) {
    const GgufBlockGeometry g = gguf_block_geometry(uint32_t(type));
    OMNIBUS_CHECK(g.block_size > 0 && g.type_size == block_bytes);
    rows[uint32_t(type)] = {type,         g.name,       g.block_size, size_t(g.type_size),
                            is_quantized, vec_dot_type, to_float,     from_float,
                            vec_dot};
    known[uint32_t(type)] = true;
  }
  DTypeTraits& at(DType t) { return rows[uint32_t(t)]; }
};

Table make_ref_table() {
  namespace r = quant_ref;
  Table t;
  // type, bytes per block, is_quantized, vec_dot_type, to_float, from_float, vec_dot
  t.add(DType::F32, sizeof(float), false, DType::F32, r::to_float_f32, r::from_float_f32,
        r::vec_dot_f32);
  t.add(DType::F16, sizeof(uint16_t), false, DType::F16, r::to_float_f16, r::from_float_f16,
        r::vec_dot_f16);
  t.add(DType::BF16, sizeof(uint16_t), false, DType::BF16, r::to_float_bf16, r::from_float_bf16,
        r::vec_dot_bf16);
  t.add(DType::Q4_0, sizeof(BlockQ4_0), true, DType::Q8_0, r::to_float_q4_0, r::from_float_q4_0,
        r::vec_dot_q4_0);
  t.add(DType::Q4_1, sizeof(BlockQ4_1), true, DType::Q8_1, r::to_float_q4_1, r::from_float_q4_1,
        r::vec_dot_q4_1);
  t.add(DType::Q5_0, sizeof(BlockQ5_0), true, DType::Q8_0, r::to_float_q5_0, r::from_float_q5_0,
        r::vec_dot_q5_0);
  t.add(DType::Q5_1, sizeof(BlockQ5_1), true, DType::Q8_1, r::to_float_q5_1, r::from_float_q5_1,
        r::vec_dot_q5_1);
  t.add(DType::Q8_0, sizeof(BlockQ8_0), true, DType::Q8_0, r::to_float_q8_0, r::from_float_q8_0,
        r::vec_dot_q8_0);
  // Q8_1 and Q8_K exist as activation formats only (no weight dot product).
  t.add(DType::Q8_1, sizeof(BlockQ8_1), true, DType::Q8_1, r::to_float_q8_1, r::from_float_q8_1,
        nullptr);
  t.add(DType::Q2_K, sizeof(BlockQ2_K), true, DType::Q8_K, r::to_float_q2_K, nullptr,
        r::vec_dot_q2_K);
  t.add(DType::Q3_K, sizeof(BlockQ3_K), true, DType::Q8_K, r::to_float_q3_K, nullptr,
        r::vec_dot_q3_K);
  t.add(DType::Q4_K, sizeof(BlockQ4_K), true, DType::Q8_K, r::to_float_q4_K, nullptr,
        r::vec_dot_q4_K);
  t.add(DType::Q5_K, sizeof(BlockQ5_K), true, DType::Q8_K, r::to_float_q5_K, nullptr,
        r::vec_dot_q5_K);
  t.add(DType::Q6_K, sizeof(BlockQ6_K), true, DType::Q8_K, r::to_float_q6_K, nullptr,
        r::vec_dot_q6_K);
  t.add(DType::Q8_K, sizeof(BlockQ8_K), true, DType::Q8_K, r::to_float_q8_K, r::from_float_q8_K,
        nullptr);
  return t;
}

// The reference table with the AVX2 kernels swapped in where they exist.
Table make_avx2_table() {
  namespace a = quant_avx2;
  Table t = make_ref_table();
  t.at(DType::F32).vec_dot = a::vec_dot_f32;
  t.at(DType::F16).vec_dot = a::vec_dot_f16;
  t.at(DType::F16).to_float = a::to_float_f16;
  t.at(DType::F16).from_float = a::from_float_f16;
  t.at(DType::BF16).vec_dot = a::vec_dot_bf16;
  t.at(DType::BF16).to_float = a::to_float_bf16;
  t.at(DType::BF16).from_float = a::from_float_bf16;
  t.at(DType::Q8_0).from_float = a::from_float_q8_0;
  t.at(DType::Q8_1).from_float = a::from_float_q8_1;
  t.at(DType::Q8_K).from_float = a::from_float_q8_K;
  t.at(DType::Q4_0).vec_dot = a::vec_dot_q4_0;
  t.at(DType::Q4_1).vec_dot = a::vec_dot_q4_1;
  t.at(DType::Q5_0).vec_dot = a::vec_dot_q5_0;
  t.at(DType::Q5_1).vec_dot = a::vec_dot_q5_1;
  t.at(DType::Q8_0).vec_dot = a::vec_dot_q8_0;
  t.at(DType::Q4_K).vec_dot = a::vec_dot_q4_K;
  t.at(DType::Q5_K).vec_dot = a::vec_dot_q5_K;
  t.at(DType::Q6_K).vec_dot = a::vec_dot_q6_K;
  t.at(DType::Q2_K).vec_dot = a::vec_dot_q2_K;
  t.at(DType::Q3_K).vec_dot = a::vec_dot_q3_K;
  return t;
}

const Table& ref_table() {
  static const Table table = make_ref_table();
  return table;
}

const Table& best_table() {
  static const Table& table = cpu_features().use_avx2()
                                  ? *new Table(make_avx2_table())  // immortal, like ref_table
                                  : ref_table();
  return table;
}

}  // namespace

bool is_known_dtype(uint32_t id) { return id < kNumIds && ref_table().known[id]; }

const DTypeTraits& dtype_traits(DType t) {
  OMNIBUS_CHECK(is_known_dtype(uint32_t(t)));
  return best_table().rows[uint32_t(t)];
}

const DTypeTraits& dtype_traits_ref(DType t) {
  OMNIBUS_CHECK(is_known_dtype(uint32_t(t)));
  return ref_table().rows[uint32_t(t)];
}

std::string_view dtype_name(DType t) {
  return is_known_dtype(uint32_t(t)) ? ref_table().rows[uint32_t(t)].name : "unknown";
}

size_t dtype_row_size(DType t, int64_t n) {
  const DTypeTraits& tr = dtype_traits_ref(t);
  OMNIBUS_CHECK(n % tr.block_size == 0);
  return size_t(n / tr.block_size) * tr.type_size;
}

}  // namespace omnibus
