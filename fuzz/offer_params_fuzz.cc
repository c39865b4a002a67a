// libFuzzer target for a request's kv_transfer_params as a decode worker
// parses them (kv_transfer/offer_params.h) and the text their signature
// covers. Any crash, sanitizer report or hang is a bug; a refusal must be
// kInvalidArgument naming the field. Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "kv_transfer/offer_params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return 0;
  std::string field;
  auto p = omnibus::kv_transfer::parse_offer_params(j, &field);
  if (!p.is_ok() && (p.status().code() != omnibus::StatusCode::kInvalidArgument || field.empty()))
    __builtin_trap();
  if (p.is_ok() && (p->blocks.size() != p->keys.size() || p->port < 1 || p->port > 65535))
    __builtin_trap();
  (void)omnibus::kv_transfer::offer_signed_text(j);
  return 0;
}
