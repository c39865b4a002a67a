// libFuzzer target for what the KV-transfer plane reads from the network
// (kv_transfer/messages.h): the side channel's sealed envelope and its claim,
// claim-reply and release messages, and the binary fetch message of the UCX
// active messages. Any crash, sanitizer report or hang is a bug; errors must
// be kInvalidArgument or kPermissionDenied. Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "kv_transfer/messages.h"
#include "kv_transfer/transfer_auth.h"

namespace {

bool expected(const omnibus::Status& s) {
  return s.is_ok() || s.code() == omnibus::StatusCode::kInvalidArgument ||
         s.code() == omnibus::StatusCode::kPermissionDenied;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace omnibus::kv_transfer;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto fetch = parse_fetch(bytes);
  if (!expected(fetch.status())) __builtin_trap();
  if (fetch.is_ok() &&
      parse_fetch(encode_fetch(*fetch)).value().ranges.size() != fetch->ranges.size()) {
    __builtin_trap();  // round trip
  }
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  static const TransferAuth auth = TransferAuth::create("fuzz-secret-0123456789").value();
  auto inner = unseal(auth, j, 1'800'000'000'000);
  if (!expected(inner.status())) __builtin_trap();
  if (!j.is_object()) return 0;
  if (!expected(parse_claim_request(j).status()) || !expected(parse_claim_reply(j).status()) ||
      !expected(parse_release_request(j).status())) {
    __builtin_trap();
  }
  return 0;
}
