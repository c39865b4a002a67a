// The KV-transfer plane's messages.
//
// Side channel (JSON objects, see side_channel.h for framing), each inside a
// sealed envelope {"msg": the message as a JSON string, "ts": unix ms,
// "mac": hex HMAC-SHA256(secret, ts + "\n" + msg)}:
//
//   {"type":"claim", "id":str, "blocks":[int32...], "keys":[hex u64...], "compat":str}
//     -> {"ok":true, "layout":{"bytes":u64, "n_blocks":int32, "k_offset":[u64...],
//                              "v_offset":[u64...], "k_block_bytes":u64,
//                              "v_block_bytes":u64, "compat":str},
//         "worker_address":hex, "token":hex (kFetchTokenBytes)}
//   {"type":"release", "id":str, "n_blocks":int32} -> {"ok":true}
//   any failure -> {"ok":false, "error":str}
//
// UCX active messages (ucx_transport.h), binary, little-endian:
//   fetch (decode -> owner): u64 fetch_id, the claim's token, u32 n, then n x
//     (u64 offset, u64 bytes): byte ranges of the owner's region, each inside
//     the claimed offer's blocks (the owner checks; anything else is refused);
//   data (owner -> decode): header DataHeader, payload the range's bytes (or,
//     for status != 0, the refusal's text).
//
// Keys travel as 16-digit hex strings: JSON numbers above 2^53 are not safe in
// every client. (A claim whose keys are unsigned JSON integers is accepted too.) Parsing checks
// every type and range and reports what is wrong (kInvalidArgument); it never throws.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kv_transfer/kv_transfer_agent.h"
#include "kv_transfer/transfer_auth.h"
#include "util/status.h"

namespace omnibus::kv_transfer {

struct ClaimRequest {
  std::string id;
  std::vector<int32_t> blocks;
  std::vector<uint64_t> keys;
  std::string compat;
};

inline constexpr size_t kFetchTokenBytes = 16;
inline constexpr uint32_t kMaxFetchRanges = 1u << 20;
inline constexpr int64_t kMaxSealAgeMs =
    60'000;  // a sealed message older (or newer) than this is refused

struct ClaimReply {
  KvRegionLayout layout;       // base == nullptr
  std::string worker_address;  // raw bytes
  std::string token;           // raw bytes: the capability a fetch of this claim presents
};

struct FetchRange {
  uint64_t offset = 0;  // in the owner's region
  uint64_t bytes = 0;
};

struct FetchRequest {
  uint64_t fetch_id = 0;  // the decode side's; echoed in every DataHeader
  std::string token;      // kFetchTokenBytes
  std::vector<FetchRange> ranges;
};

struct DataHeader {
  uint64_t fetch_id = 0;
  uint32_t range = 0;   // index into the fetch's ranges
  uint32_t status = 0;  // 0: the range's bytes follow; else the fetch was refused
};

struct ReleaseRequest {
  std::string id;
  int32_t n_blocks = 0;
};

nlohmann::json to_json(const ClaimRequest& r);
nlohmann::json to_json(const ClaimReply& r);
nlohmann::json to_json(const ReleaseRequest& r);
nlohmann::json error_json(const std::string& message);

StatusOr<ClaimRequest> parse_claim_request(const nlohmann::json& j);
StatusOr<ClaimReply> parse_claim_reply(const nlohmann::json& j);
StatusOr<ReleaseRequest> parse_release_request(const nlohmann::json& j);

// The side channel's envelope. unseal: kPermissionDenied when the MAC is
// missing or wrong or the timestamp is more than kMaxSealAgeMs away from
// now_ms; kInvalidArgument when the sealed text is not a JSON object.
nlohmann::json seal(const TransferAuth& auth, const nlohmann::json& message, int64_t now_ms);
StatusOr<nlohmann::json> unseal(const TransferAuth& auth, const nlohmann::json& envelope,
                                int64_t now_ms);

std::string encode_fetch(const FetchRequest& r);
// kInvalidArgument for a truncated or oversized message; never reads past it.
StatusOr<FetchRequest> parse_fetch(std::string_view bytes);

}  // namespace omnibus::kv_transfer
