// SHA-256 (FIPS 180-4), for checking that a data file is the one a golden
// file or a download was made from, and under HMAC (kv_transfer/transfer_auth.h).
// Its running time depends only on the input's length, not on its bytes.
//
// Thread-safety: a Sha256 belongs to one thread; the free functions are pure.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace omnibus {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  // The 32-byte digest. REQUIRES: called once, last (or hex_digest()).
  std::array<uint8_t, 32> digest();
  // The digest as 64 lowercase hex digits. REQUIRES: called once, last.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_len_ = 0;  // bytes
};

std::string sha256_hex(std::string_view bytes);

// The file's SHA-256 in hex; nullopt when it cannot be read.
std::optional<std::string> sha256_file_hex(const std::string& path);

}  // namespace omnibus
