// TransferAuth: the shared secret of one deployment's KV-transfer plane
// (docs/security.md). Every prefill and decode worker is started with the same
// secret (--kv-transfer-secret-file, or --kv-transfer-secret). It
//   - signs the kv_transfer_params a prefill worker hands out (the offer's
//     "omnibus.mac"): a decode worker checks it before it connects anywhere,
//     so a client can neither forge an offer nor point one at another host;
//   - signs every side-channel message, both ways (side_channel.h): a peer
//     without the secret is refused before its message is parsed.
//
// HMAC-SHA256 (RFC 2104, test vectors of RFC 4231 in transfer_auth_test.cc);
// MACs are compared in constant time.
//
// Thread-safety: immutable after create(); shared by any threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace omnibus::kv_transfer {

std::array<uint8_t, 32> hmac_sha256(std::string_view key, std::string_view message);

// Equal strings, in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

class TransferAuth {
 public:
  static constexpr size_t kMinSecretBytes = 16;

  // kInvalidArgument when the secret is shorter than kMinSecretBytes.
  static StatusOr<TransferAuth> create(std::string_view secret);
  // Reads the secret from a file (surrounding whitespace trimmed); refuses a
  // file that others may read (mode & 077), as ssh does with its keys.
  static StatusOr<TransferAuth> from_file(const std::string& path);

  // 64 lowercase hex digits.
  std::string mac_hex(std::string_view message) const;
  bool verify_hex(std::string_view message, std::string_view mac_hex) const;

 private:
  explicit TransferAuth(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

}  // namespace omnibus::kv_transfer
