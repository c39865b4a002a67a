#include "kv_transfer/transfer_auth.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/sha256.h"

namespace omnibus::kv_transfer {

std::array<uint8_t, 32> hmac_sha256(std::string_view key, std::string_view message) {
  constexpr size_t kBlock = 64;
  std::array<uint8_t, kBlock> k{};
  if (key.size() > kBlock) {
    Sha256 h;
    h.update(key);
    const std::array<uint8_t, 32> d = h.digest();
    std::memcpy(k.data(), d.data(), d.size());
  } else {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::array<char, kBlock> ipad, opad;
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(std::string_view(ipad.data(), kBlock));
  inner.update(message);
  const std::array<uint8_t, 32> inner_digest = inner.digest();
  Sha256 outer;
  outer.update(std::string_view(opad.data(), kBlock));
  outer.update(
      std::string_view(reinterpret_cast<const char*>(inner_digest.data()), inner_digest.size()));
  return outer.digest();
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

StatusOr<TransferAuth> TransferAuth::create(std::string_view secret) {
  if (secret.size() < kMinSecretBytes) {
    return Status::invalid_argument(
        "the KV-transfer secret has {} bytes; it needs at least {} (e.g. `openssl rand "
        "-hex 32`)",
        secret.size(), kMinSecretBytes);
  }
  return TransferAuth(std::string(secret));
}

StatusOr<TransferAuth> TransferAuth::from_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::not_found("cannot read the KV-transfer secret file {}: {}", path,
                             std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode))
    return Status::invalid_argument("the KV-transfer secret file {} is not a file", path);
  if ((st.st_mode & 077) != 0) {
    return Status::invalid_argument(
        "the KV-transfer secret file {} may be read by others (mode {:o}); chmod 600 it", path,
        st.st_mode & 0777);
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) return Status::not_found("cannot read the KV-transfer secret file {}", path);
  std::string s = ss.str();
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return create(b == std::string::npos ? std::string_view()
                                       : std::string_view(s).substr(b, e - b + 1));
}

std::string TransferAuth::mac_hex(std::string_view message) const {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t byte : hmac_sha256(key_, message)) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xF]);
  }
  return out;
}

bool TransferAuth::verify_hex(std::string_view message, std::string_view mac) const {
  return constant_time_equal(mac_hex(message), mac);
}

}  // namespace omnibus::kv_transfer
