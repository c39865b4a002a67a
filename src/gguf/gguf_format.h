// GGUF format constants: the metadata value types and the ggml tensor type
// geometry (block size, bytes per block) that the reader needs to validate
// tensor extents.
//
// Layout (little-endian, versions 2 and 3; docs/gguf.md has the details):
//   "GGUF" u32 version u64 n_tensors u64 n_kv
//   n_kv    x { string key, u32 value_type, value }
//   n_tensors x { string name, u32 n_dims, i64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to `alignment`, then the data section.
//   string = u64 length + bytes (no terminator);
//   array  = u32 element_type + u64 count + elements.
//
// The tensor types (DType, ggml's type ids) and their geometry are owned here,
// the lowest module that needs them; kernels/dtype.h builds its kernel table
// on top of them (gguf sits below kernels and does not include it).
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace omnibus {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr uint32_t kGgufMaxDims = 4;  // GGML_MAX_DIMS
inline constexpr const char* kGgufAlignmentKey = "general.alignment";

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kGgufTypeCount = 13;

// "u8", "i32", "f32", "bool", "string", "array", ...; "?" for an unknown id.
const char* gguf_type_name(GgufType t);
// Bytes of one value of a fixed-size type; 0 for kString and kArray (and ids
// >= kGgufTypeCount).
size_t gguf_type_size(GgufType t);
bool gguf_type_is_integer(GgufType t);

// The tensor element types omnibus reads. Numeric values are ggml's type ids
// as stored in GGUF tensor infos.
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

// Storage geometry of a ggml tensor type: a row of n elements is
// n / block_size blocks of type_size bytes each.
struct GgufBlockGeometry {
  int64_t block_size = 0;  // 0: omnibus does not know this type
  uint64_t type_size = 0;
  const char* name = nullptr;  // ggml's name ("q4_1"); set for every ggml id, even unknown geometry
};

// Geometry of the types omnibus reads (DType):
// F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K..Q8_K. For other ggml type ids
// block_size is 0 and `name` is ggml's name if the id exists in ggml, else null.
GgufBlockGeometry gguf_block_geometry(uint32_t type_id);

}  // namespace omnibus
