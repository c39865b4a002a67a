// The side channel's messages (JSON objects, see side_channel.h for framing).
//
//   {"type":"claim", "id":str, "blocks":[int32...], "keys":[hex u64...], "compat":str}
//     -> {"ok":true, "layout":{"bytes":u64, "n_blocks":int32, "k_offset":[u64...],
//                              "v_offset":[u64...], "k_block_bytes":u64,
//                              "v_block_bytes":u64, "compat":str},
//         "worker_address":hex, "rkey":hex, "base":u64}
//   {"type":"release", "id":str, "n_blocks":int32} -> {"ok":true}
//   any failure -> {"ok":false, "error":str}
//
// Keys travel as 16-digit hex strings: JSON numbers above 2^53 are not safe in
// every client. (A claim whose keys are unsigned JSON integers is accepted too.) Parsing checks every type and range and reports what is wrong
// (kInvalidArgument); it never throws.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv_transfer/kv_transfer_agent.h"
#include "util/status.h"

namespace omnibus::kv_transfer {

struct ClaimRequest {
  std::string id;
  std::vector<int32_t> blocks;
  std::vector<uint64_t> keys;
  std::string compat;
};

struct ClaimReply {
  KvRegionLayout layout;  // base == nullptr
  std::string worker_address;  // raw bytes
  std::string rkey;            // raw bytes
  uint64_t base = 0;           // the owner's region address in its process
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

}  // namespace omnibus::kv_transfer
