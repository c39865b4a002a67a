// encode_kv_event_batch, decoded back with msgpack-c: the batch array, the
// tagged event maps and their fields, as vLLM sends them.
#include "kv_events/kv_event_encoding.h"

#include <gtest/gtest.h>

#include <map>
#include <msgpack.hpp>
#include <string>

namespace omnibus {
namespace {

std::map<std::string, msgpack::object> fields(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::MAP);
  std::map<std::string, msgpack::object> out;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    out[o.via.map.ptr[i].key.as<std::string>()] = o.via.map.ptr[i].val;
  }
  return out;
}

TEST(KvEventEncoding, BatchIsAnArrayOfTimestampEventsAndRank) {
  std::vector<KvEvent> events;
  events.push_back(KvBlockStored{{1, 0xfedcba9876543210ull}, std::nullopt, {1, 2, 3, 4, 5, 6}, 3});
  events.push_back(KvBlockStored{{7}, 0xfedcba9876543210ull, {9, 9, 9}, 3});
  events.push_back(KvBlockRemoved{{1, 7}});
  events.push_back(KvAllBlocksCleared{});
  const std::string bytes = encode_kv_event_batch(1700000000.25, events, 0);

  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& batch = h.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 1700000000.25);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 0);
  const msgpack::object& evs = batch.via.array.ptr[1];
  ASSERT_EQ(evs.type, msgpack::type::ARRAY);
  ASSERT_EQ(evs.via.array.size, 4u);

  auto stored = fields(evs.via.array.ptr[0]);
  EXPECT_EQ(stored.size(), 8u);
  EXPECT_EQ(stored["type"].as<std::string>(), "BlockStored");
  EXPECT_EQ(stored["block_hashes"].as<std::vector<uint64_t>>(),
            std::vector<uint64_t>({1, 0xfedcba9876543210ull}));
  EXPECT_TRUE(stored["parent_block_hash"].is_nil());
  EXPECT_EQ(stored["token_ids"].as<std::vector<int>>(), std::vector<int>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(stored["block_size"].as<int>(), 3);
  EXPECT_TRUE(stored["lora_id"].is_nil());
  EXPECT_EQ(stored["medium"].as<std::string>(), "CPU");
  EXPECT_TRUE(stored["lora_name"].is_nil());
  // u64 hashes stay unsigned on the wire (routers reject negative ones).
  EXPECT_EQ(stored["block_hashes"].via.array.ptr[1].type, msgpack::type::POSITIVE_INTEGER);

  auto child = fields(evs.via.array.ptr[1]);
  EXPECT_EQ(child["parent_block_hash"].as<uint64_t>(), 0xfedcba9876543210ull);

  auto removed = fields(evs.via.array.ptr[2]);
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed["type"].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(removed["block_hashes"].as<std::vector<uint64_t>>(), std::vector<uint64_t>({1, 7}));
  EXPECT_EQ(removed["medium"].as<std::string>(), "CPU");

  auto cleared = fields(evs.via.array.ptr[3]);
  EXPECT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared["type"].as<std::string>(), "AllBlocksCleared");
}

TEST(KvEventEncoding, NoRankIsNil) {
  const std::string bytes = encode_kv_event_batch(1.0, {}, std::nullopt);
  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  ASSERT_EQ(h.get().via.array.size, 3u);
  EXPECT_TRUE(h.get().via.array.ptr[2].is_nil());
  EXPECT_EQ(h.get().via.array.ptr[1].via.array.size, 0u);
}

}  // namespace
}  // namespace omnibus
