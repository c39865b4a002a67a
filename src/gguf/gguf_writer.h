// GgufWriter: builds a GGUF file (version 2 or 3, little-endian) in memory.
// Used by tests across modules to write tiny models with random weights, and
// by the fuzz corpus generator.
//
// Metadata keeps insertion order; setting a key again replaces its value in
// place. Tensors keep insertion order and are laid out back to back, each at a
// multiple of the alignment (32, or general.alignment when set as an integer).
// Programming errors (data of the wrong size, an unknown dtype, a bad shape)
// are OMNIBUS_CHECK failures: the writer's callers are tests, not users.
//
// Thread-safety: none; one writer per thread. to_bytes()/write() are const.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_format.h"
#include "util/status.h"

namespace omnibus {

class GgufWriter {
 public:
  void set_u8(std::string key, uint8_t v);
  void set_i8(std::string key, int8_t v);
  void set_u16(std::string key, uint16_t v);
  void set_i16(std::string key, int16_t v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_u64(std::string key, uint64_t v);
  void set_i64(std::string key, int64_t v);
  void set_f32(std::string key, float v);
  void set_f64(std::string key, double v);
  void set_bool(std::string key, bool v);
  void set_string(std::string key, std::string v);

  void set_string_array(std::string key, std::vector<std::string> v);
  void set_f32_array(std::string key, std::vector<float> v);
  void set_f64_array(std::string key, std::vector<double> v);
  void set_i32_array(std::string key, std::vector<int32_t> v);
  void set_u32_array(std::string key, std::vector<uint32_t> v);
  void set_i64_array(std::string key, std::vector<int64_t> v);
  void set_u8_array(std::string key, std::vector<uint8_t> v);
  void set_bool_array(std::string key, std::vector<bool> v);
  // Any fixed-size element type: `payload` holds count little-endian elements.
  // REQUIRES: elem_type is neither kString nor kArray, and
  // payload.size() == count * gguf_type_size(elem_type).
  void set_array_raw(std::string key, GgufType elem_type, uint64_t count,
                     std::vector<uint8_t> payload);

  // Shape in ggml order (shape[0] innermost). REQUIRES: 1..4 dims, each > 0,
  // shape[0] a multiple of the type's block size, and
  // data.size() == row_size(type, shape[0]) * prod(shape[1..]).
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape,
                  std::vector<uint8_t> data);

  // REQUIRES: version 2 or 3 (same layout little-endian).
  std::vector<uint8_t> to_bytes(uint32_t version = 3) const;
  Status write(const std::string& path, uint32_t version = 3) const;

  // Bytes a tensor of this type and shape occupies (for tests that build data).
  // REQUIRES: the type has known geometry and shape[0] is a multiple of its block size.
  static size_t tensor_bytes(DType type, const std::vector<int64_t>& shape);

 private:
  struct Kv {
    std::string key;
    GgufType type;
    GgufType array_type = GgufType::kUint8;
    uint64_t array_size = 0;
    std::vector<uint8_t> payload;  // encoded value (for arrays: the elements only)
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };

  void set(Kv kv);
  uint64_t alignment() const;

  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace omnibus
