#include "kv/kv_events.h"

#include "util/check.h"

namespace omnibus {

void KvEventRecorder::stored(uint64_t key, std::optional<uint64_t> parent,
                             std::span<const int32_t> tokens, int32_t block_size) {
  OMNIBUS_CHECK(int64_t(tokens.size()) == block_size);
  if (!events_.empty()) {
    if (auto* last = std::get_if<KvBlockStored>(&events_.back());
        last != nullptr && parent.has_value() && last->block_size == block_size &&
        last->block_hashes.back() == *parent) {
      last->block_hashes.push_back(key);
      last->token_ids.insert(last->token_ids.end(), tokens.begin(), tokens.end());
      return;
    }
  }
  KvBlockStored e;
  e.block_hashes.push_back(key);
  e.parent_block_hash = parent;
  e.token_ids.assign(tokens.begin(), tokens.end());
  e.block_size = block_size;
  events_.emplace_back(std::move(e));
}

void KvEventRecorder::removed(uint64_t key) {
  if (!events_.empty()) {
    if (auto* last = std::get_if<KvBlockRemoved>(&events_.back())) {
      last->block_hashes.push_back(key);
      return;
    }
  }
  events_.emplace_back(KvBlockRemoved{{key}});
}

void KvEventRecorder::cleared() { events_.emplace_back(KvAllBlocksCleared{}); }

std::vector<KvEvent> KvEventRecorder::take() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace omnibus
