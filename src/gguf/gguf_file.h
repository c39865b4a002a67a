// GgufFile: a read-only, memory-mapped GGUF file (versions 2 and 3) whose
// every count, length, type id, dimension, offset and extent has been checked
// against the file size before use.
//
// open() mmaps the file and parses the header, the metadata key/values and the
// tensor infos; tensor data stays in the mapping and GgufTensor::data points
// into it. String and array values are not copied either: getters decode them
// from the mapping on demand. A file that violates the format yields one
// Status (kCorrupt, kUnsupported, kIo or kNotFound) whose message names the
// file, the field and its byte offset, e.g.
//   "model.gguf: tensor 12 ('blk.0.attn_q.weight') data [123, 456) extends
//    beyond end of file (size 400) (tensor info at byte 9876)"
// docs/gguf.md lists what is validated.
//
// Tensor shapes are in ggml order: shape[0] is the innermost (contiguous)
// dimension, so a [n_embd, n_vocab] embedding is shape {576, 49152}.
//
// Thread-safety: immutable after open(); any number of threads may read it.
// release_pages() changes only which of its bytes are resident, never their
// values, and may be called while other threads read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf_format.h"
#include "util/status.h"

namespace omnibus {

// One metadata entry. The value lives in the file's bytes; read it through
// GgufFile's getters or value_to_string().
struct GgufKv {
  std::string key;
  GgufType type = GgufType::kUint8;        // kArray for arrays
  GgufType array_type = GgufType::kUint8;  // element type when type == kArray
  uint64_t array_size = 0;                 // element count when type == kArray

  // Representation (read by GgufFile; stable for the file's lifetime):
  // `value` points at the value's bytes in the mapping: a scalar's bytes, a
  // string's characters (value_bytes of them), or an array's first element.
  // value_bytes is the payload size in bytes (for a string array, including
  // each element's u64 length prefix).
  const uint8_t* value = nullptr;
  uint64_t value_bytes = 0;
  uint64_t key_offset = 0;  // byte offset of this entry in the file
};

struct GgufTensor {
  std::string name;
  DType type = DType::F32;     // a type with known geometry (see gguf_block_geometry)
  std::vector<int64_t> shape;  // ggml order; 1..4 dims, each > 0
  int64_t n_elements = 0;
  uint64_t offset = 0;         // relative to the start of the data section; a multiple of alignment
  uint64_t file_offset = 0;    // absolute
  size_t n_bytes = 0;          // row_size(type, shape[0]) * product(shape[1..])
  const void* data = nullptr;  // points into the mapping
  uint64_t info_offset = 0;    // byte offset of this tensor's info record
};

class GgufFile {
 public:
  // mmaps `path` read-only and validates it. kNotFound if it does not exist,
  // kIo if it cannot be opened or mapped, kUnsupported for GGUF v1, big-endian
  // or future versions and for ggml tensor types omnibus does not read,
  // kCorrupt for everything else that violates the format.
  static StatusOr<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses a copy of data[0..size) (tests, fuzzing). Same validation; `name`
  // takes the place of the path in messages.
  static StatusOr<std::unique_ptr<GgufFile>> from_bytes(const uint8_t* data, size_t size,
                                                        std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }      // general.alignment or 32
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section

  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufKv* find(std::string_view key) const;

  // Typed getters: nullopt when the key is missing or has another type.
  // get_int accepts every integer type (u64 values above INT64_MAX: nullopt);
  // get_float accepts f32 and f64.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;  // view into the mapping
  // Arrays: nullopt when missing, not an array, or of another element type.
  std::optional<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(
      std::string_view key) const;  // f32 or f64 elements
  std::optional<std::vector<int64_t>> get_int_array(
      std::string_view key) const;  // any integer elements

  // Status-returning variants for required keys: kNotFound "<path>: missing
  // metadata key 'k'" or kCorrupt "<path>: metadata key 'k' has type string,
  // expected an integer (at byte N)".
  StatusOr<int64_t> require_int(std::string_view key) const;
  StatusOr<double> require_float(std::string_view key) const;
  StatusOr<std::string_view> require_string(std::string_view key) const;

  // Human-readable value; arrays abbreviated to max_elements elements
  // (`[49152 strings: "<|endoftext|>", "<|im_start|>", ...]`), strings to
  // max_string_chars characters, quoted and escaped.
  std::string value_to_string(const GgufKv& kv, size_t max_elements = 8,
                              size_t max_string_chars = 120) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

  // Drops this process's resident copy of the file pages that lie wholly
  // inside [data, data + n_bytes) (madvise MADV_DONTNEED on the read-only
  // private mapping), e.g. once a tensor has been copied elsewhere. The bytes
  // stay readable: a later read faults them in again from the file, unchanged.
  // Pages shared with a neighbouring range are kept. No-op for a from_bytes()
  // copy. REQUIRES: the range lies inside the file.
  void release_pages(const void* data, size_t n_bytes) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  // Constant after construction.
  std::string path_;
  const uint8_t* base_ = nullptr;  // the mapping (or owned copy)
  uint64_t size_ = 0;
  bool mapped_ = false;  // munmap on destruction, else operator delete[]
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;      // keys view into the mapping
  std::unordered_map<std::string_view, size_t> tensor_index_;  // names view into the mapping
};

}  // namespace omnibus
