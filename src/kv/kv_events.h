// KvEventRecorder: the changes of the prefix cache's key set, as plain
// events, for subscribers outside the process (KV-aware routers; see
// docs/kv-events.md and src/kv_events/ for the wire format).
//
// PrefixCache appends to a recorder when one is attached (off by default: a
// null pointer test per change, no allocation). Replaying the events in order
// on an empty set of keys gives exactly the keys the cache holds:
//   KvBlockStored     its block_hashes joined the cache (registered)
//   KvBlockRemoved    its block_hashes left it (evicted, replaced, cleared one by one)
//   KvAllBlocksCleared every key left it
// A duplicate registration (an existing block returned) changes nothing and
// records nothing.
//
// Consecutive events of one kind are merged when that keeps the meaning: a
// KvBlockStored whose parent is the last hash of the previous KvBlockStored
// extends it (vLLM's one event per run of blocks); removals accumulate.
//
// Thread-safety: none; the engine thread owns it (as it owns the cache).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

namespace omnibus {

struct KvBlockStored {
  std::vector<uint64_t> block_hashes;         // a chain: each one's parent is the one before
  std::optional<uint64_t> parent_block_hash;  // of block_hashes[0]; nullopt: the root
  std::vector<int32_t> token_ids;             // [block_hashes.size() * block_size]
  int32_t block_size = 0;
};

struct KvBlockRemoved {
  std::vector<uint64_t> block_hashes;
};

struct KvAllBlocksCleared {};

using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

class KvEventRecorder {
 public:
  // One block registered under `key` after `parent` (nullopt: the root).
  // REQUIRES: tokens.size() == block_size.
  void stored(uint64_t key, std::optional<uint64_t> parent, std::span<const int32_t> tokens,
              int32_t block_size);
  void removed(uint64_t key);
  // Every key dropped: earlier events of this batch no longer matter to the
  // set, but they are kept (a subscriber sees each change once, in order).
  void cleared();

  bool empty() const { return events_.empty(); }
  size_t size() const { return events_.size(); }
  // The events recorded since the last take, oldest first; leaves it empty.
  std::vector<KvEvent> take();

 private:
  std::vector<KvEvent> events_;
};

}  // namespace omnibus
