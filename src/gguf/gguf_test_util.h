// Test helpers for src/gguf tests: a raw byte builder for hand-made (often
// deliberately broken) GGUF files, and deterministic tensor data.
// Header-only; included only by *_test.cc files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace omnibus::testing {

// Appends little-endian fields; no validation at all.
class RawGguf {
 public:
  RawGguf& u8(uint8_t v) { return put(v); }
  RawGguf& u32(uint32_t v) { return put(v); }
  RawGguf& u64(uint64_t v) { return put(v); }
  RawGguf& i64(int64_t v) { return put(v); }
  RawGguf& str(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes_.insert(bytes_.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  RawGguf& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  RawGguf& tensor(std::string_view name, const std::vector<int64_t>& shape, uint32_t type,
                  uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(shape.size()));
    for (int64_t ne : shape) i64(ne);
    return u32(type).u64(offset);
  }
  RawGguf& pad(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  template <typename T>
  RawGguf& put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

// n bytes of a fixed pseudo-random sequence (xorshift), different per seed.
inline std::vector<uint8_t> test_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    out[i] = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

}  // namespace omnibus::testing
