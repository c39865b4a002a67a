// EngineConfig::on_kv_events: the prefix cache's events reach the callback on
// the engine thread, and replaying them gives the cache's size, through a
// pool small enough to evict; without the callback nothing is recorded.
#include <gtest/gtest.h>

#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"

namespace omnibus {
namespace {

EngineConfig small_pool(Model& model, int32_t n_blocks) {
  EngineConfig c;
  c.block_size = 4;
  c.kv_format = KvFormat::kF32;
  const KvGeometry g = model.kv_geometry(c.block_size, c.kv_format);
  c.kv_cache_bytes = int64_t(g.bytes_per_block()) * n_blocks + int64_t(g.fixed_bytes(n_blocks));
  c.max_num_batched_tokens = 32;
  c.log_startup = false;
  return c;
}

TEST(EngineKvEvents, ReplayedEventsGiveTheCachedBlocks) {
  FakeModel model;
  EngineConfig cfg = small_pool(model, 24);
  std::mutex mu;
  std::set<uint64_t> keys;  // guarded by mu
  size_t n_stored = 0, n_removed = 0;
  std::thread::id engine_thread;
  cfg.on_kv_events = [&](std::vector<KvEvent> events) {
    std::lock_guard<std::mutex> lock(mu);
    engine_thread = std::this_thread::get_id();
    for (const KvEvent& e : events) {
      if (const auto* s = std::get_if<KvBlockStored>(&e)) {
        for (uint64_t k : s->block_hashes) EXPECT_TRUE(keys.insert(k).second);
        n_stored += s->block_hashes.size();
      } else if (const auto* r = std::get_if<KvBlockRemoved>(&e)) {
        for (uint64_t k : r->block_hashes) EXPECT_EQ(keys.erase(k), 1u);
        n_removed += r->block_hashes.size();
      } else {
        keys.clear();
      }
    }
  };
  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  std::mt19937 rng(3);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 12; ++i) {
    Request r;
    for (int j = 0; j < 9 + i % 3 * 8; ++j)
      r.prompt.push_back(int32_t(j < 8 ? (i % 4) * 8 + j : rng() % 64));
    r.max_tokens = 6;
    r.ignore_eos = true;
    r.sampling = greedy();
    auto s = (*engine)->submit(std::move(r));
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  for (auto& s : streams) collect(*s);
  std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(engine_thread, std::this_thread::get_id());
  EXPECT_GT(n_removed, 0u) << "the pool should have evicted";
  EXPECT_EQ(n_stored - n_removed, keys.size());
  EXPECT_EQ(int32_t(keys.size()), st->kv_blocks_cached);
}

}  // namespace
}  // namespace omnibus
