// kv_transfer_params as a decode worker reads them from a prefill worker's
// offer (server/kv_transfer_service.h): parsed for types and ranges, and the
// text the offer's signature covers. Nothing here acts on them, connects anywhere
// or knows the engine: the service checks the signature, the peers, the
// compatibility and the hash chain after parsing.
//
// Thread-safety: pure functions. Fuzzed (fuzz/offer_params_fuzz.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/status.h"

namespace omnibus::kv_transfer {

struct ImportParams {
  std::string engine_id;
  std::string request_id;       // [A-Za-z0-9_-], <= 128
  std::string host;             // <= 255 bytes
  int port = 0;                 // [1, 65535]
  std::vector<int32_t> blocks;  // the prefill worker's block ids, < 2^30
  std::vector<uint64_t> keys;   // omnibus.block_hashes, one per block
  std::string compat;           // omnibus.compat
  int64_t window_offset = -1;   // omnibus.window (kivi2): -1 when absent
  uint64_t window_bytes = 0;
};

// kInvalidArgument for a wrong type or range: the message reads
// "kv_transfer_params.<field> <what>" and *bad_field (if given) is the field
// ("remote_port", "omnibus.window", ...). REQUIRES: an object.
StatusOr<ImportParams> parse_offer_params(const nlohmann::json& params,
                                          std::string* bad_field = nullptr);

// What "omnibus.mac" signs: every field a decode worker acts on, as one
// canonical JSON text (keys sorted, ASCII), so that a router may re-serialize
// the object but no field can be changed, added or dropped.
std::string offer_signed_text(const nlohmann::json& params);

// 16 lowercase hex digits.
std::string hex64(uint64_t v);

}  // namespace omnibus::kv_transfer
