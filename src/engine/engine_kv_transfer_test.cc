// Disaggregated prefill/decode at the engine's seams: a prefill engine pins a
// finished prompt's blocks (Request::pin_prompt_blocks), a decode engine
// imports them (Request::kv_import) through a fetch that copies the bytes
// between the two pools in memory, the way the UCX agent does between
// processes. The decode engine's outputs equal a single engine's bitwise, for
// every KV format (f32, f16, q8, q4, and kivi2, whose fp16 window rows move
// through a transfer slot with the blocks); it fetches only what its own
// prefix cache lacks; failures, aborts and a lack of transfer slots fall back
// or end cleanly, and nothing leaks.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "kernels/thread_pool.h"
#include "kv/prefix_cache.h"

namespace omnibus {
namespace {

EngineConfig config_for(Model& model, KvFormat format, int32_t n_blocks) {
  EngineConfig c;
  c.block_size = 16;
  c.kv_format = format;
  const KvGeometry g = model.kv_geometry(16, format);
  c.kv_cache_bytes = int64_t(g.bytes_per_block()) * n_blocks + int64_t(g.fixed_bytes(n_blocks));
  c.max_num_batched_tokens = 32;
  c.log_startup = false;
  return c;
}

std::vector<int32_t> prompt_of(int32_t n, uint32_t seed, int32_t n_vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = int32_t(rng() % uint32_t(n_vocab - 1)) + 1;
  return p;
}

// Copies blocks between two engines' pools, layer by layer (what the agent's
// segments describe).
void copy_blocks(const KvRegionInfo& from, const std::vector<int32_t>& src, const KvRegionInfo& to,
                 const std::vector<int32_t>& dst) {
  ASSERT_EQ(src.size(), dst.size());
  ASSERT_EQ(from.k_block_bytes, to.k_block_bytes);
  for (size_t l = 0; l < from.k_offset.size(); ++l) {
    for (size_t i = 0; i < src.size(); ++i) {
      std::memcpy(static_cast<char*>(to.base) + to.k_offset[l] + size_t(dst[i]) * to.k_block_bytes,
                  static_cast<const char*>(from.base) + from.k_offset[l] +
                      size_t(src[i]) * from.k_block_bytes,
                  from.k_block_bytes);
      std::memcpy(static_cast<char*>(to.base) + to.v_offset[l] + size_t(dst[i]) * to.v_block_bytes,
                  static_cast<const char*>(from.base) + from.v_offset[l] +
                      size_t(src[i]) * from.v_block_bytes,
                  from.v_block_bytes);
    }
  }
}

struct ImportLog {
  int32_t n_local = -1, n_fetched = -1;
  bool failed = false;
  int calls = 0;
};

// An import of `pinned` from `prefill` that copies synchronously (or fails).
std::shared_ptr<KvImport> import_from(Engine& prefill, const KvPinned& pinned, Engine& decode,
                                      ImportLog& log, bool fail = false) {
  auto im = std::make_shared<KvImport>();
  im->n_blocks = int32_t(pinned.blocks.size());
  const KvRegionInfo from = prefill.kv_region(), to = decode.kv_region();
  im->fetch = [from, to, blocks = pinned.blocks, window_offset = pinned.window_offset,
               window_bytes = pinned.window_bytes,
               fail](int32_t first, std::vector<int32_t> local, int64_t window_dst,
                     std::function<void(bool)> done) {
    if (!fail) {
      std::vector<int32_t> src(blocks.begin() + first,
                               blocks.begin() + first + int32_t(local.size()));
      copy_blocks(from, src, to, local);
      if (window_dst >= 0) {  // the window rows, from the prefill's transfer slot to the decode's
        EXPECT_GE(window_offset, 0);
        EXPECT_EQ(window_bytes, to.window_bytes);
        EXPECT_LE(uint64_t(window_dst) + window_bytes, to.bytes);
        std::memcpy(static_cast<char*>(to.base) + window_dst,
                    static_cast<const char*>(from.base) + window_offset, window_bytes);
      }
    }
    // From another thread, as the agent does.
    std::thread([done, fail] { done(!fail); }).detach();
  };
  im->finished = [&log](int32_t n_local, int32_t n_fetched, bool failed) {
    log.n_local = n_local;
    log.n_fetched = n_fetched;
    log.failed = failed;
    ++log.calls;
  };
  return im;
}

Request request(const std::vector<int32_t>& prompt, int32_t max_tokens, SamplingParams p) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling = std::move(p);
  return r;
}

// The prefill engine's answer: one token, the prompt pinned.
std::shared_ptr<const KvPinned> prefill_pin(Engine& prefill, const std::vector<int32_t>& prompt) {
  Request r = request(prompt, 1, greedy());
  r.pin_prompt_blocks = true;
  auto s = prefill.submit(std::move(r));
  EXPECT_TRUE(s.is_ok());
  std::vector<EngineEvent> events;
  collect(**s, &events);
  EXPECT_FALSE(events.empty());
  return events.empty() ? nullptr : events.back().pinned;
}

void expect_transfer_exact(KvFormat format) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const int32_t n_vocab = model->config().n_vocab;
  auto prefill = Engine::create(*model, config_for(*model, format, 64));
  auto decode = Engine::create(*model, config_for(*model, format, 48));  // a pool of another size
  auto single = Engine::create(*model, config_for(*model, format, 64));
  ASSERT_TRUE(prefill.is_ok() && decode.is_ok() && single.is_ok());

  const std::vector<int32_t> prompt = prompt_of(70, 11, n_vocab);  // 4 full blocks + 6 tokens
  for (const SamplingParams& params : {greedy(), seeded(7)}) {
    auto s = (*single)->submit(request(prompt, 12, params));
    ASSERT_TRUE(s.is_ok());
    const auto want = collect(**s);

    const std::shared_ptr<const KvPinned> pinned = prefill_pin(**prefill, prompt);
    ASSERT_NE(pinned, nullptr);
    ASSERT_EQ(pinned->blocks.size(), 4u);  // (70 - 1) / 16
    const auto pstats = (*prefill)->wait_idle(std::chrono::seconds(30));
    ASSERT_TRUE(pstats.has_value());
    EXPECT_EQ(pstats->kv_blocks_pinned, 4);

    const auto before = (*decode)->wait_idle(std::chrono::seconds(30));
    ASSERT_TRUE(before.has_value());
    ImportLog log;
    Request r = request(prompt, 12, params);
    r.kv_import = import_from(**prefill, *pinned, **decode, log);
    auto d = (*decode)->submit(std::move(r));
    ASSERT_TRUE(d.is_ok());
    std::vector<EngineEvent> events;
    const auto got = collect(**d, &events);
    EXPECT_EQ(got.at(0).tokens, want.at(0).tokens) << kv_format_name(format);
    EXPECT_EQ(log.calls, 1);
    EXPECT_FALSE(log.failed);
    // Both rounds start after the 4 blocks: the model runs the last 6 prompt
    // tokens and 11 decodes (kivi2: only if the window rows came along; the
    // tiny model's tokens cannot tell wrong rows from right ones, so
    // KvStorage.WindowRowsMoveWithTheBlocks checks the rows and the attention
    // after them bitwise).
    const auto after = (*decode)->wait_idle(std::chrono::seconds(30));
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->n_tokens_processed - before->n_tokens_processed, 6u + 11u)
        << kv_format_name(format);
    // The second round finds the blocks the first fetched in its own cache.
    if (params.has_seed) {
      EXPECT_EQ(log.n_local, 4);
      EXPECT_EQ(log.n_fetched, 0);
      EXPECT_EQ(events.back().n_cached_tokens, 64);
    } else {
      EXPECT_EQ(log.n_local, 0);
      EXPECT_EQ(log.n_fetched, 4);
      EXPECT_EQ(events.back().n_cached_tokens, 0);  // fetched, not cached
    }
    (*prefill)->unpin(pinned->pin_id);
  }
  ASSERT_TRUE((*prefill)->wait_idle(std::chrono::seconds(30)).has_value());
  ASSERT_TRUE((*decode)->wait_idle(std::chrono::seconds(30)).has_value());
  const EngineStats ds = (*decode)->stats();
  EXPECT_EQ(ds.kv_imports, 2u);
  EXPECT_EQ(ds.kv_import_blocks_fetched, 4u);
  EXPECT_EQ(ds.kv_import_blocks_local, 4u);
  EXPECT_EQ(ds.kv_import_fallbacks, 0u);
}

TEST(EngineKvTransfer, ImportedBlocksGiveTheSingleEngineOutputsF32) {
  expect_transfer_exact(KvFormat::kF32);
}
TEST(EngineKvTransfer, ImportedBlocksGiveTheSingleEngineOutputsF16) {
  expect_transfer_exact(KvFormat::kF16);
}
TEST(EngineKvTransfer, ImportedBlocksGiveTheSingleEngineOutputsQ8) {
  expect_transfer_exact(KvFormat::kQ8);
}
TEST(EngineKvTransfer, ImportedBlocksGiveTheSingleEngineOutputsQ4) {
  expect_transfer_exact(KvFormat::kQ4);
}
TEST(EngineKvTransfer, ImportedBlocksGiveTheSingleEngineOutputsKivi2) {
  expect_transfer_exact(KvFormat::kKivi2);
}

// kivi2: a second import that shares the first one's leading blocks finds
// them locally although they have no fp16 rows (only where a hit ends needs
// them, and those come along), and fetches only the rest.
TEST(EngineKvTransfer, Kivi2ASharedPrefixIsNotFetchedAgain) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const int32_t n_vocab = model->config().n_vocab;
  auto prefill = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 64));
  auto decode = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 64));
  auto single = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 64));
  ASSERT_TRUE(prefill.is_ok() && decode.is_ok() && single.is_ok());
  const std::vector<int32_t> a = prompt_of(70, 31, n_vocab);  // 4 full blocks + 6
  std::vector<int32_t> b(a.begin(), a.begin() + 40);          // blocks 0, 1 shared
  const std::vector<int32_t> tail = prompt_of(30, 32, n_vocab);
  b.insert(b.end(), tail.begin(), tail.end());
  int32_t want_local = 0;
  for (const std::vector<int32_t>* prompt : {&a, static_cast<const std::vector<int32_t>*>(&b)}) {
    auto s = (*single)->submit(request(*prompt, 8, greedy()));
    ASSERT_TRUE(s.is_ok());
    const auto want = collect(**s);
    const auto pinned = prefill_pin(**prefill, *prompt);
    ASSERT_NE(pinned, nullptr);
    ASSERT_EQ(pinned->blocks.size(), 4u);
    const auto before = (*decode)->wait_idle(std::chrono::seconds(30));
    ASSERT_TRUE(before.has_value());
    ImportLog log;
    Request r = request(*prompt, 8, greedy());
    r.kv_import = import_from(**prefill, *pinned, **decode, log);
    auto d = (*decode)->submit(std::move(r));
    ASSERT_TRUE(d.is_ok());
    EXPECT_EQ(collect(**d).at(0).tokens, want.at(0).tokens);
    EXPECT_EQ(log.n_local, want_local);
    EXPECT_EQ(log.n_fetched, 4 - want_local);
    EXPECT_FALSE(log.failed);
    const auto after = (*decode)->wait_idle(std::chrono::seconds(30));
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->n_tokens_processed - before->n_tokens_processed, 6u + 7u);
    (*prefill)->unpin(pinned->pin_id);
    want_local = 2;
  }
  // A prompt whose 3 blocks are a's first 3, cached here without rows where
  // its hit ends: only the rows move (no block), and the hit is whole.
  std::vector<int32_t> c(a.begin(), a.begin() + 48);
  const std::vector<int32_t> tail_c = prompt_of(6, 33, n_vocab);
  c.insert(c.end(), tail_c.begin(), tail_c.end());
  auto s = (*single)->submit(request(c, 8, greedy()));
  ASSERT_TRUE(s.is_ok());
  const auto want = collect(**s);
  const auto pinned = prefill_pin(**prefill, c);
  ASSERT_NE(pinned, nullptr);
  ASSERT_EQ(pinned->blocks.size(), 3u);
  const auto before = (*decode)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(before.has_value());
  ImportLog log;
  Request r = request(c, 8, greedy());
  r.kv_import = import_from(**prefill, *pinned, **decode, log);
  auto d = (*decode)->submit(std::move(r));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(collect(**d).at(0).tokens, want.at(0).tokens);
  EXPECT_EQ(log.n_local, 3);
  EXPECT_EQ(log.n_fetched, 0);
  EXPECT_FALSE(log.failed);
  const auto after = (*decode)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->n_tokens_processed - before->n_tokens_processed, 6u + 7u);
  EXPECT_EQ(after->kv_import_fallbacks, 0u);
  EXPECT_EQ(after->kv_blocks_used, 0);
  (*prefill)->unpin(pinned->pin_id);
}

// kivi2: a pin exports its window rows into a transfer slot (in the region,
// after the blocks) and gives it back at unpin.
TEST(EngineKvTransfer, Kivi2PinsExportTheirWindowRows) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  auto engine = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 32));
  ASSERT_TRUE(engine.is_ok());
  const KvRegionInfo region = (*engine)->kv_region();
  ASSERT_GT(region.window_bytes, 0u);
  const std::vector<int32_t> prompt = prompt_of(40, 4, model->config().n_vocab);
  std::vector<uint64_t> pins;
  for (int i = 0; i < kKvTransferSlots;
       ++i) {  // every transfer slot: distinct offsets past the blocks
    const auto pinned = prefill_pin(**engine, prompt);
    ASSERT_NE(pinned, nullptr);
    ASSERT_EQ(pinned->blocks.size(), 2u);
    EXPECT_EQ(pinned->window_bytes, region.window_bytes);
    EXPECT_GE(uint64_t(pinned->window_offset), size_t(region.n_blocks) *
                                                   (region.k_block_bytes + region.v_block_bytes) *
                                                   region.k_offset.size());
    EXPECT_LE(uint64_t(pinned->window_offset) + pinned->window_bytes, region.bytes);
    pins.push_back(pinned->pin_id);
  }
  // None left: the prompt is not offered (a decode worker computes it).
  const auto none = prefill_pin(**engine, prompt);
  ASSERT_NE(none, nullptr);
  EXPECT_TRUE(none->blocks.empty());
  EXPECT_LT(none->window_offset, 0);
  (*engine)->unpin(none->pin_id);
  (*engine)->unpin(pins.back());
  const auto again = prefill_pin(**engine, prompt);  // the unpinned slot is free again
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->blocks.size(), 2u);
  EXPECT_GE(again->window_offset, 0);
  pins.back() = again->pin_id;
  for (uint64_t id : pins) (*engine)->unpin(id);
  auto check =
      (*engine)->submit(request(prompt, 1, greedy()));  // one more iteration takes the unpins
  ASSERT_TRUE(check.is_ok());
  collect(**check);
  const auto idle = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->kv_pins, 0);
  EXPECT_EQ(idle->kv_blocks_used, 0);
}

// kivi2: a decode engine whose transfer slots are all taken (by its own
// pins) does not fetch: it computes the prompt, with the same outputs.
TEST(EngineKvTransfer, Kivi2WithoutAFreeTransferSlotComputesThePromptHere) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  auto prefill = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 32));
  auto decode = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 64));
  auto single = Engine::create(*model, config_for(*model, KvFormat::kKivi2, 32));
  ASSERT_TRUE(prefill.is_ok() && decode.is_ok() && single.is_ok());
  const int32_t n_vocab = model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_of(60, 21, n_vocab);
  auto s = (*single)->submit(request(prompt, 8, greedy()));
  ASSERT_TRUE(s.is_ok());
  const auto want = collect(**s).at(0);
  std::vector<uint64_t> decode_pins;
  for (int i = 0; i < kKvTransferSlots; ++i) {
    const auto p = prefill_pin(**decode, prompt_of(20, 300 + uint32_t(i), n_vocab));
    ASSERT_NE(p, nullptr);
    ASSERT_GE(p->window_offset, 0);
    decode_pins.push_back(p->pin_id);
  }
  const auto pinned = prefill_pin(**prefill, prompt);
  ASSERT_NE(pinned, nullptr);
  ASSERT_EQ(pinned->blocks.size(), 3u);
  ImportLog log;
  Request r = request(prompt, 8, greedy());
  r.kv_import = import_from(**prefill, *pinned, **decode, log);
  auto d = (*decode)->submit(std::move(r));
  ASSERT_TRUE(d.is_ok());
  std::vector<EngineEvent> events;
  EXPECT_EQ(collect(**d, &events).at(0).tokens, want.tokens);
  EXPECT_EQ(log.calls, 1);
  EXPECT_TRUE(log.failed);
  EXPECT_EQ(log.n_fetched, 0);
  EXPECT_EQ(events.back().n_cached_tokens, 0);
  (*prefill)->unpin(pinned->pin_id);
  for (uint64_t id : decode_pins) (*decode)->unpin(id);
  auto check = (*decode)->submit(request(prompt, 1, greedy()));
  ASSERT_TRUE(check.is_ok());
  collect(**check);
  const auto idle = (*decode)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->kv_import_fallbacks, 1u);
  EXPECT_EQ(idle->kv_import_blocks_fetched, 0u);
  EXPECT_EQ(idle->kv_pins, 0);
  EXPECT_EQ(idle->kv_blocks_used, 0);
}

TEST(EngineKvTransfer, PinsHoldTheirBlocksUntilUnpinned) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  auto engine = Engine::create(*model, config_for(*model, KvFormat::kF16, 32));
  ASSERT_TRUE(engine.is_ok());
  const std::vector<int32_t> prompt = prompt_of(48, 3, model->config().n_vocab);  // block-aligned
  const auto pinned = prefill_pin(**engine, prompt);
  ASSERT_NE(pinned, nullptr);
  ASSERT_EQ(pinned->blocks.size(), 2u);  // the block holding the last token stays behind
  uint64_t parent = PrefixCache::kRootKey;
  for (size_t i = 0; i < 2; ++i) {
    parent = PrefixCache::chain_key(std::span<const int32_t>(prompt.data() + i * 16, 16), parent);
    EXPECT_EQ(pinned->keys[i], parent);
  }
  const auto idle = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->kv_pins, 1);
  EXPECT_EQ(idle->kv_blocks_used, 2);
  // Requests that run meanwhile cannot evict pinned blocks: fill the pool.
  for (uint32_t i = 0; i < 3; ++i) {
    auto s =
        (*engine)->submit(request(prompt_of(200, 100 + i, model->config().n_vocab), 8, greedy()));
    ASSERT_TRUE(s.is_ok());
    collect(**s);
  }
  (*engine)->unpin(pinned->pin_id);
  (*engine)->unpin(pinned->pin_id);                              // twice: ignored
  auto check = (*engine)->submit(request(prompt, 1, greedy()));  // one more iteration
  ASSERT_TRUE(check.is_ok());
  collect(**check);
  // wait_idle: the stats of the iteration that finished it, which took the unpins.
  const auto after = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->kv_pins, 0);
  EXPECT_EQ(after->kv_blocks_used, 0);
}

TEST(EngineKvTransfer, AFailedFetchComputesThePromptHere) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  auto prefill = Engine::create(*model, config_for(*model, KvFormat::kF16, 32));
  auto decode = Engine::create(*model, config_for(*model, KvFormat::kF16, 32));
  ASSERT_TRUE(prefill.is_ok() && decode.is_ok());
  const std::vector<int32_t> prompt = prompt_of(60, 5, model->config().n_vocab);
  const auto want = reference_generate(*model, prompt, 8, greedy(), KvFormat::kF16);
  const auto pinned = prefill_pin(**prefill, prompt);
  ASSERT_NE(pinned, nullptr);
  ImportLog log;
  Request r = request(prompt, 8, greedy());
  r.kv_import = import_from(**prefill, *pinned, **decode, log, /*fail=*/true);
  auto d = (*decode)->submit(std::move(r));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(collect(**d).at(0).tokens, want.tokens);
  EXPECT_TRUE(log.failed);
  EXPECT_EQ(log.n_fetched, 0);
  const auto idle = (*decode)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->kv_import_fallbacks, 1u);
  EXPECT_EQ(idle->kv_blocks_used, 0);
}

// A fetch that has not ended holds its blocks: an abort waits for it, and so
// does shutting the engine down; nothing is freed under a write.
TEST(EngineKvTransfer, AbortAndShutdownWaitForAFetchInFlight) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  auto decode = Engine::create(*model, config_for(*model, KvFormat::kF16, 32));
  ASSERT_TRUE(decode.is_ok());
  const std::vector<int32_t> prompt = prompt_of(60, 9, model->config().n_vocab);

  std::promise<std::function<void(bool)>> started;
  ImportLog log;
  auto im = std::make_shared<KvImport>();
  im->n_blocks = 3;
  im->fetch = [&started](int32_t, std::vector<int32_t> local, int64_t,
                         std::function<void(bool)> done) {
    EXPECT_EQ(local.size(), 3u);
    started.set_value(std::move(done));
  };
  im->finished = [&log](int32_t n_local, int32_t n_fetched, bool failed) {
    log = ImportLog{n_local, n_fetched, failed, log.calls + 1};
  };
  Request r = request(prompt, 8, greedy());
  r.kv_import = im;
  auto d = (*decode)->submit(std::move(r));
  ASSERT_TRUE(d.is_ok());
  std::function<void(bool)> done = started.get_future().get();
  (*decode)->abort((*d)->id());
  // A request after the abort: the stats of its step show the abort taken in,
  // and the 3 blocks still held (the fetch may be writing).
  const uint64_t s0 = (*decode)->stats().n_steps;
  auto other = (*decode)->submit(request(prompt_of(10, 77, model->config().n_vocab), 1, greedy()));
  ASSERT_TRUE(other.is_ok());
  collect(**other);
  const auto held = (*decode)->wait_for_step(s0 + 1, std::chrono::seconds(30));
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->kv_blocks_used, 3);
  done(false);
  std::vector<EngineEvent> events;
  collect(**d, &events);
  EXPECT_EQ(events.back().finish, FinishReason::kAbort);
  EXPECT_EQ(log.calls, 1);
  const auto idle = (*decode)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->kv_blocks_used, 0);

  // Shutdown with a fetch in flight: the destructor waits for done.
  std::promise<std::function<void(bool)>> started2;
  im->fetch = [&started2](int32_t, std::vector<int32_t>, int64_t,
                          std::function<void(bool)> fetch_done) {
    started2.set_value(std::move(fetch_done));
  };
  Request r2 = request(prompt, 8, greedy());
  r2.kv_import = im;
  auto d2 = (*decode)->submit(std::move(r2));
  ASSERT_TRUE(d2.is_ok());
  std::function<void(bool)> done2 = started2.get_future().get();
  std::thread closer([&decode] { decode->reset(); });
  done2(true);
  closer.join();
  std::vector<EngineEvent> events2;
  collect(**d2, &events2);
  // Aborted by the shutdown, or finished first if the fetch ended before the
  // engine saw the stop: either way the stream ends.
  ASSERT_FALSE(events2.empty());
  EXPECT_TRUE(events2.back().final);
  EXPECT_TRUE(events2.back().finish == FinishReason::kAbort ||
              events2.back().finish == FinishReason::kLength);
}

}  // namespace
}  // namespace omnibus
