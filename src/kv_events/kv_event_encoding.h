// The msgpack payload of one KV-event batch, in the encoding vLLM's
// ZmqEventPublisher sends and KV-aware routers decode (docs/kv-events.md):
//
//   batch  = [ts (float64 seconds since the epoch), [event, ...], dp_rank (int | nil)]
//   event  = a map tagged under "type" (msgspec tag=True without array_like,
//            what vLLM sends since vllm-project/vllm#42892, and what
//            vllm-router 0.1.17's kv_index/wire.rs reads):
//     {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64 | nil,
//      "token_ids": [int...], "block_size": int, "lora_id": nil, "medium": "CPU",
//      "lora_name": nil}
//     {"type": "BlockRemoved", "block_hashes": [u64...], "medium": "CPU"}
//     {"type": "AllBlocksCleared"}
// vLLM omits fields that hold their default (extra_keys, group_idx, ...);
// so does this. The batch itself stays a positional array in both.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "kv/kv_events.h"

namespace omnibus {

inline constexpr const char* kKvEventMedium = "CPU";

std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events,
                                  std::optional<int> dp_rank);

}  // namespace omnibus
