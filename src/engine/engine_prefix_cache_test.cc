// Prefix caching through the Engine: outputs with the cache on equal outputs
// with it off — tokens, and bitwise the logits they were sampled from — for
// shared prefixes, after eviction and preemption, with forced hash
// collisions, n > 1, aborts and multi-turn resubmission; on the fake model, a
// tiny random Llama (real kernels) and SmolLM2 when its file exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_outcome_testing.h"
#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"
#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "kv/kv_quant.h"
#include "model/tiny_model_testing.h"
#include "util/sanitizers.h"

namespace omnibus {
namespace {

EngineConfig base_config(Model& model, int32_t block_size, int32_t n_blocks, int32_t budget,
                         KvFormat kv_format) {
  EngineConfig c;
  c.block_size = block_size;
  c.kv_format = kv_format;
  const KvGeometry g = model.kv_geometry(block_size, kv_format);
  c.kv_cache_bytes = int64_t(g.bytes_per_block()) * n_blocks + int64_t(g.fixed_bytes(n_blocks));
  c.max_num_batched_tokens = budget;
  c.log_startup = false;
  return c;
}

Outcome run_off(Model& model, EngineConfig cfg, const std::vector<Request>& reqs, bool sequential) {
  cfg.enable_prefix_caching = false;
  return run_all(model, std::move(cfg), reqs, sequential);
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n, int32_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = int32_t(rng() % uint32_t(n_vocab));
  return t;
}

// n_groups prefixes of prefix_len tokens; each request = a prefix + unique tokens.
std::vector<Request> shared_prefix_requests(std::mt19937& rng, int32_t n_vocab, int32_t n_groups,
                                            int32_t n_per_group, int32_t prefix_len,
                                            int32_t max_unique, int32_t max_tokens,
                                            bool seeded_sampling) {
  std::vector<std::vector<int32_t>> prefixes;
  for (int32_t g = 0; g < n_groups; ++g)
    prefixes.push_back(random_tokens(rng, prefix_len, n_vocab));
  std::vector<Request> reqs;
  for (int32_t i = 0; i < n_groups * n_per_group; ++i) {
    Request r;
    r.prompt = prefixes[size_t(i % n_groups)];
    const std::vector<int32_t> own =
        random_tokens(rng, 1 + int32_t(rng() % uint32_t(max_unique)), n_vocab);
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling = seeded_sampling ? seeded(1000 + uint64_t(i), 0.9f) : greedy();
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(EnginePrefixCache, SharedPrefixesHitAndMatchTheUncachedRun) {
  FakeModel model;
  std::mt19937 rng(5);
  const std::vector<Request> reqs = shared_prefix_requests(rng, 64, 3, 6, 37, 9, 6, false);
  const EngineConfig cfg = base_config(model, 4, 512, 64, KvFormat::kF32);
  for (bool sequential : {true, false}) {
    const Outcome on = run_all(model, cfg, reqs, sequential);
    const Outcome off = run_off(model, cfg, reqs, sequential);
    expect_same_outputs(on, off);
    EXPECT_GT(on.stats.prefix_cache_hits, 0u);
    EXPECT_EQ(off.stats.prefix_cache_queries, 0u);
    EXPECT_LT(on.stats.n_tokens_processed, off.stats.n_tokens_processed);
    if (sequential) {
      // Each group's first request misses; the others get the 36-token prefix (9 blocks).
      for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(on.n_cached[i], i < 3 ? 0 : 36) << i;
      uint64_t queries = 0;
      for (const Request& r : reqs) queries += r.prompt.size();
      EXPECT_EQ(on.stats.prefix_cache_queries, queries);
      EXPECT_EQ(on.stats.prefix_cache_hits, 15u * 36u);
      EXPECT_NEAR(on.stats.prefix_cache_hit_rate, double(15 * 36) / double(queries), 1e-12);
    }
  }
}

// A pool far smaller than the working set: cached blocks are evicted and
// running sequences preempted and resumed (hitting their own freed blocks
// when still cached); seeded sampling continues exactly. Forced collisions
// (key masks) only cost hits.
TEST(EnginePrefixCache, EvictionPreemptionAndCollisionsKeepOutputsExact) {
  FakeModel model;
  std::mt19937 rng(9);
  const std::vector<Request> reqs = shared_prefix_requests(rng, 64, 4, 5, 13, 6, 20, true);
  // 96 slots; a request needs <= 39
  EngineConfig cfg = base_config(model, 4, 24, 32, KvFormat::kF32);
  const Outcome off = run_off(model, cfg, reqs, false);
  EXPECT_GT(off.stats.n_preemptions, 0u);
  for (uint64_t mask : {~uint64_t(0), uint64_t(0), uint64_t(7)}) {
    cfg.prefix_cache_key_mask_for_testing = mask;
    for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kCacheAware}) {
      cfg.scheduling_policy = policy;
      const Outcome on = run_all(model, cfg, reqs, false);
      expect_same_outputs(on, off);
      EXPECT_GT(on.stats.n_preemptions, 0u) << mask;
      if (mask == ~uint64_t(0)) {
        EXPECT_GT(on.stats.prefix_cache_hits, 0u);
      }
    }
  }
  // One group after another through a pool that holds ~2 requests: a group
  // hits its own prefix, later groups evict it.
  std::vector<Request> by_group;
  for (size_t g = 0; g < 4; ++g) {
    for (size_t i = g; i < reqs.size(); i += 4) by_group.push_back(reqs[i]);
  }
  cfg.prefix_cache_key_mask_for_testing = ~uint64_t(0);
  cfg.scheduling_policy = SchedulingPolicy::kCacheAware;
  const Outcome seq_on = run_all(model, cfg, by_group, true);
  const Outcome seq_off = run_off(model, cfg, by_group, true);
  expect_same_outputs(seq_on, seq_off);
  EXPECT_GT(seq_on.stats.prefix_cache_hits, 0u);
}

TEST(EnginePrefixCache, ParallelSamplingForksShareTheCachedPrefix) {
  FakeModel model;
  std::mt19937 rng(3);
  const std::vector<int32_t> prefix = random_tokens(rng, 22, 64);
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.prompt = prefix;
    r.prompt.push_back(i);
    r.max_tokens = 9;
    r.n = 3;
    r.sampling = seeded(77 + uint64_t(i));
    reqs.push_back(std::move(r));
  }
  const EngineConfig cfg = base_config(model, 4, 256, 16, KvFormat::kF32);
  const Outcome on = run_all(model, cfg, reqs, true);
  expect_same_outputs(on, run_off(model, cfg, reqs, true));
  EXPECT_EQ(on.n_cached, (std::vector<int32_t>{0, 20, 20}));
  // The first computes 23 prompt tokens, the others 3; each sequence 8 decodes.
  EXPECT_EQ(on.stats.n_tokens_processed, 23u + 3u + 3u + 9u * 8u);
}

TEST(EnginePrefixCache, AbortingOneSharerLeavesTheOthersExact) {
  FakeModel model;
  model.set_step_delay(std::chrono::milliseconds(1));
  std::mt19937 rng(4);
  std::vector<Request> reqs = shared_prefix_requests(rng, 64, 1, 6, 24, 5, 30, false);
  const EngineConfig cfg = base_config(model, 4, 256, 16, KvFormat::kF32);
  const Outcome off = run_off(model, cfg, reqs, false);

  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok());
  // The first request computes the prefix; the others then share its blocks.
  auto first = (*engine)->submit(reqs[0]);
  ASSERT_TRUE(first.is_ok());
  ASSERT_TRUE((*first)->pop(std::chrono::seconds(30)).has_value());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 1; i < reqs.size(); ++i) streams.push_back(*(*engine)->submit(reqs[i]));
  ASSERT_TRUE(streams[2]->pop(std::chrono::seconds(30)).has_value());
  (*engine)->abort(streams[2]->id());
  EXPECT_EQ(collect(*streams[2])[0].finish, FinishReason::kAbort);
  for (size_t i = 0; i < streams.size(); ++i) {
    if (i == 2) continue;
    std::vector<EngineEvent> events;
    auto out = collect(*streams[i], &events);
    EXPECT_EQ(out[0].tokens, off.results[i + 1].at(0).tokens) << i;
    EXPECT_EQ(events.front().n_cached_tokens, 24) << i;
  }
  collect(**first);
}

// flush_prefix_cache (the /flush_cache endpoint): refused while a request is
// in the engine, done when idle; cached_block_hashes lists the prefix cache
// between steps, and after a flush the same prompt is computed again.
TEST(EnginePrefixCache, FlushIsRefusedWhileRequestsRunAndEmptiesTheCacheWhenIdle) {
  FakeModel model;
  std::mt19937 rng(12);
  Request r;
  r.prompt = random_tokens(rng, 18, 64);  // 4 full blocks of 4
  r.max_tokens = 3;
  r.ignore_eos = true;
  r.sampling = greedy();
  auto engine = Engine::create(model, base_config(model, 4, 64, 16, KvFormat::kF32));
  ASSERT_TRUE(engine.is_ok());
  EXPECT_TRUE((*engine)->cached_block_hashes().empty());
  {
    // A long request, still running when the flush is asked (aborted after).
    model.set_step_delay(std::chrono::milliseconds(1));
    Request long_one = r;
    long_one.max_tokens = 200;
    auto s = (*engine)->submit(long_one);
    ASSERT_TRUE(s.is_ok());
    ASSERT_TRUE((*s)->pop(std::chrono::seconds(30)).has_value());  // it runs
    EXPECT_FALSE((*engine)->flush_prefix_cache());
    (*engine)->abort((*s)->id());
    collect(**s);
    model.set_step_delay(std::chrono::milliseconds(0));
  }
  ASSERT_TRUE((*engine)->wait_idle(std::chrono::seconds(30)).has_value());
  EXPECT_FALSE((*engine)->cached_block_hashes().empty());
  EXPECT_TRUE((*engine)->flush_prefix_cache());  // idle now
  EXPECT_TRUE((*engine)->cached_block_hashes().empty());

  collect(**(*engine)->submit(r));
  ASSERT_TRUE((*engine)->wait_idle(std::chrono::seconds(30)).has_value());
  const std::vector<uint64_t> cached = (*engine)->cached_block_hashes();
  EXPECT_GE(cached.size(), 4u);
  EXPECT_TRUE((*engine)->flush_prefix_cache());
  EXPECT_TRUE((*engine)->cached_block_hashes().empty());

  std::vector<EngineEvent> events;
  collect(**(*engine)->submit(r), &events);
  EXPECT_EQ(events.front().n_cached_tokens, 0);  // computed again
  ASSERT_TRUE((*engine)->wait_idle(std::chrono::seconds(30)).has_value());
  std::vector<uint64_t> again = (*engine)->cached_block_hashes();
  std::vector<uint64_t> before = cached;
  std::sort(again.begin(), again.end());
  std::sort(before.begin(), before.end());
  EXPECT_EQ(again, before);  // the same blocks, the same keys
}

// Prompt logprobs need every prompt position's logits: such a request
// computes its whole prompt even when it is cached, and the logprobs equal
// those of the uncached run.
TEST(EnginePrefixCache, PromptLogprobsBypassTheCache) {
  FakeModel model;
  std::mt19937 rng(8);
  const std::vector<int32_t> prompt = random_tokens(rng, 19, 64);
  Request plain;
  plain.prompt = prompt;
  plain.max_tokens = 2;
  plain.sampling = greedy();
  Request with_lp = plain;
  with_lp.prompt_logprobs = 3;
  const EngineConfig cfg = base_config(model, 4, 64, 8, KvFormat::kF32);
  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok());
  collect(**(*engine)->submit(plain));
  std::vector<EngineEvent> on_events, off_events;
  collect(**(*engine)->submit(with_lp), &on_events);
  EXPECT_EQ(on_events.front().n_cached_tokens, 0);
  EngineConfig off_cfg = cfg;
  off_cfg.enable_prefix_caching = false;
  auto off = Engine::create(model, off_cfg);
  ASSERT_TRUE(off.is_ok());
  collect(**(*off)->submit(with_lp), &off_events);
  const auto& a = on_events.front().prompt_logprobs;
  const auto& b = off_events.front().prompt_logprobs;
  ASSERT_EQ(a.size(), prompt.size() - 1);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].logprob, b[i].logprob) << i;
    EXPECT_EQ(a[i].top_logprobs, b[i].top_logprobs) << i;
  }
  // A plain request afterwards still hits (the logprobs request registered its blocks).
  std::vector<EngineEvent> again;
  collect(**(*engine)->submit(plain), &again);
  EXPECT_EQ(again.front().n_cached_tokens, 16);
}

// A chat turn resends the history (prompt + generated tokens): everything the
// previous turn computed in full blocks is reused, generated tokens included.
TEST(EnginePrefixCache, MultiTurnReusesTheGeneratedTokens) {
  FakeModel model;
  const EngineConfig cfg = base_config(model, 4, 256, 64, KvFormat::kF32);
  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok());
  std::mt19937 rng(1);
  std::vector<int32_t> history;
  for (int turn = 0; turn < 4; ++turn) {
    const std::vector<int32_t> user = random_tokens(rng, 7, 64);
    history.insert(history.end(), user.begin(), user.end());
    Request r;
    r.prompt = history;
    r.max_tokens = 5;
    r.ignore_eos = true;
    r.sampling = greedy();
    std::vector<EngineEvent> events;
    auto out = collect(**(*engine)->submit(r), &events);
    // The previous turn computed its prompt and all but its last output token.
    const int32_t prev_computed = int32_t(history.size()) - 7 - 1;
    const int32_t want = turn == 0 ? 0 : prev_computed / 4 * 4;
    EXPECT_EQ(events.front().n_cached_tokens, want) << "turn " << turn;
    history.insert(history.end(), out[0].tokens.begin(), out[0].tokens.end());
  }
}

void expect_real_model_exact(Model& model, int32_t prefix_len, int32_t max_tokens,
                             KvFormat kv_format = KvFormat::kF16) {
  std::mt19937 rng(2025);
  const int32_t n_vocab = model.config().n_vocab;
  const std::vector<Request> reqs =
      shared_prefix_requests(rng, n_vocab, 2, 3, prefix_len, 8, max_tokens, false);
  const EngineConfig cfg = base_config(model, 16, 128, 64, kv_format);
  const Outcome on = run_all(model, cfg, reqs, true);
  const Outcome off = run_off(model, cfg, reqs, true);
  expect_same_outputs(on, off);
  EXPECT_EQ(on.n_cached[4], prefix_len / 16 * 16);
  // Together, with a small budget (chunked prompts, shared steps).
  const Outcome together = run_all(model, base_config(model, 16, 128, 24, kv_format), reqs, false);
  expect_same_outputs(together, off);
  // kivi2: every read was the format's own (no residual slot stolen)
  EXPECT_EQ(on.stats.kv_residual_steals + off.stats.kv_residual_steals +
                together.stats.kv_residual_steals,
            0u);
}

TEST(EnginePrefixCache, TinyLlamaBitwiseEqual) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  expect_real_model_exact(*model, 40, 6);
}

// kivi2 reads the block before a query's open one in fp16 (its residual
// window): a hit must find those rows still held, and then gives exactly the
// recomputed outputs.
TEST(EnginePrefixCache, TinyLlamaKivi2BitwiseEqual) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->kv_geometry(16, KvFormat::kKivi2).residual_blocks(), 1);
  expect_real_model_exact(*model, 40, 6, KvFormat::kKivi2);
}

TEST(EnginePrefixCache, SmolLM2BitwiseEqual) {
  if (kUnderSanitizer) GTEST_SKIP() << "too slow under a sanitizer; the release run covers it";
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_smollm2_if_present(pool);
  if (model == nullptr) {
    GTEST_SKIP() << "models/smollm2-135m.gguf not loaded (run the setup script)";
  }
  expect_real_model_exact(*model, 40, 4);
}

}  // namespace
}  // namespace omnibus
