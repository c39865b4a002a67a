#include "kv_events/kv_event_encoding.h"

#include <cstring>
#include <type_traits>

// MSGPACK_NO_BOOST: defined by CMake (header-only msgpack-c without Boost).
#include <msgpack.hpp>

namespace omnibus {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& p, const char* s) {
  const size_t n = std::strlen(s);
  p.pack_str(uint32_t(n));
  p.pack_str_body(s, uint32_t(n));
}

void pack_hashes(Packer& p, const std::vector<uint64_t>& hashes) {
  p.pack_array(uint32_t(hashes.size()));
  for (uint64_t h : hashes) p.pack_uint64(h);
}

void pack_event(Packer& p, const KvBlockStored& e) {
  p.pack_map(8);
  pack_str(p, "type");
  pack_str(p, "BlockStored");
  pack_str(p, "block_hashes");
  pack_hashes(p, e.block_hashes);
  pack_str(p, "parent_block_hash");
  if (e.parent_block_hash) {
    p.pack_uint64(*e.parent_block_hash);
  } else {
    p.pack_nil();
  }
  pack_str(p, "token_ids");
  p.pack_array(uint32_t(e.token_ids.size()));
  for (int32_t t : e.token_ids) p.pack_int32(t);
  pack_str(p, "block_size");
  p.pack_int32(e.block_size);
  pack_str(p, "lora_id");
  p.pack_nil();
  pack_str(p, "medium");
  pack_str(p, kKvEventMedium);
  pack_str(p, "lora_name");
  p.pack_nil();
}

void pack_event(Packer& p, const KvBlockRemoved& e) {
  p.pack_map(3);
  pack_str(p, "type");
  pack_str(p, "BlockRemoved");
  pack_str(p, "block_hashes");
  pack_hashes(p, e.block_hashes);
  pack_str(p, "medium");
  pack_str(p, kKvEventMedium);
}

void pack_event(Packer& p, const KvAllBlocksCleared&) {
  p.pack_map(1);
  pack_str(p, "type");
  pack_str(p, "AllBlocksCleared");
}

}  // namespace

std::string encode_kv_event_batch(double ts, std::span<const KvEvent> events,
                                  std::optional<int> dp_rank) {
  msgpack::sbuffer buf;
  Packer p(buf);
  p.pack_array(3);
  p.pack_double(ts);
  p.pack_array(uint32_t(events.size()));
  for (const KvEvent& e : events) {
    std::visit([&p](const auto& ev) { pack_event(p, ev); }, e);
  }
  if (dp_rank) {
    p.pack_int32(*dp_rank);
  } else {
    p.pack_nil();
  }
  return std::string(buf.data(), buf.size());
}

}  // namespace omnibus
