// Sliding-window KV through the Engine (kv/kv_layer_groups.h): a tiny random
// Gemma 3 (window 8, so sequences run far past it) gives bitwise the same
// tokens and logits with its sliding layers' blocks let go as with every
// layer keeping every token (--no-sliding-window-kv), across KV formats and
// block sizes, chunked prefill, prefix-cache hits, preemption and n > 1; and
// holds fewer bytes doing it.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine/engine_outcome_testing.h"
#include "engine/engine_test_util.h"
#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

// 6 layers, full attention at 2 and 5: groups {2, 5}, {0, 1}, {3, 4}.
// 7 layers: a last sliding group of one layer, {6}, padded to two tensors.
std::unique_ptr<Model> load_tiny_gemma3(ThreadPool& pool, int n_layer) {
  TinyGemma3Spec spec;
  spec.n_layer = n_layer;
  spec.n_ctx = 256;
  spec.sliding_window = 8;
  spec.swa_pattern = 3;
  return load_gguf_bytes(make_tiny_gemma3_gguf(spec, 11), "tiny-gemma3.gguf", pool);
}

// A pool of n_blocks blocks of the uniform layout (every layer).
EngineConfig config(Model& model, int32_t block_size, int32_t n_blocks, KvFormat format,
                    bool sliding_window_kv) {
  EngineConfig c;
  c.block_size = block_size;
  c.kv_format = format;
  c.kv_cache_bytes = int64_t(model.kv_geometry(block_size, format).bytes_per_block()) * n_blocks;
  c.max_num_batched_tokens = 16;  // prompts run in chunks
  c.long_prefill_token_threshold = 8;
  c.sliding_window_kv = sliding_window_kv;
  c.log_startup = false;
  return c;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n, int32_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = 2 + int32_t(rng() % uint32_t(n_vocab - 2));
  return t;
}

// Prompts of 1..70 tokens (past the window of 8 many times over), some
// sharing a 24-token prefix; greedy and seeded sampling.
std::vector<Request> mixed_requests(uint32_t seed, int32_t n_vocab, int32_t n) {
  std::mt19937 rng(seed);
  const std::vector<int32_t> prefix = random_tokens(rng, 24, n_vocab);
  std::vector<Request> reqs;
  for (int32_t i = 0; i < n; ++i) {
    Request r;
    if (i % 3 == 0) r.prompt = prefix;
    const std::vector<int32_t> own = random_tokens(rng, 1 + int32_t(rng() % 46), n_vocab);
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.max_tokens = 12 + int32_t(rng() % 20);
    r.ignore_eos = true;
    r.sampling = i % 2 == 0 ? greedy() : seeded(500 + uint64_t(i), 0.9f);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(EngineSlidingWindow, BitwiseEqualToEveryLayerKeepingEveryToken) {
  ThreadPool pool(2);
  for (int n_layer : {6, 7}) {
    std::unique_ptr<Model> model = load_tiny_gemma3(pool, n_layer);
    ASSERT_NE(model, nullptr);
    const std::vector<Request> reqs = mixed_requests(7, model->config().n_vocab, 10);
    for (KvFormat format : {KvFormat::kF32, KvFormat::kF16, KvFormat::kQ8}) {
      for (int32_t block_size : {4, 16}) {
        SCOPED_TRACE(::testing::Message() << n_layer << " layers, " << kv_format_name(format)
                                          << ", block size " << block_size);
        const Outcome full = run_all(
            *model, config(*model, block_size, 4096 / block_size, format, false), reqs, false);
        const Outcome hybrid = run_all(
            *model, config(*model, block_size, 4096 / block_size, format, true), reqs, false);
        EXPECT_EQ(full.info.kv_layer_groups, 1);
        EXPECT_EQ(hybrid.info.kv_layer_groups, n_layer == 6 ? 3 : 4);
        expect_same_outputs(hybrid, full);
        EXPECT_GT(hybrid.stats.prefix_cache_hits, 0u);
      }
    }
  }
}

TEST(EngineSlidingWindow, HitsPreemptionAndForksStayExact) {
  ThreadPool pool(2);
  std::unique_ptr<Model> model = load_tiny_gemma3(pool, 6);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(3, model->config().n_vocab, 12);
  for (size_t i = 0; i < reqs.size(); i += 4) {
    reqs[i].n = 3;
    reqs[i].sampling = seeded(90 + i);
  }
  // The reference: every layer keeps every token, no prefix cache, room for all.
  EngineConfig ref_cfg = config(*model, 4, 1024, KvFormat::kF32, false);
  ref_cfg.enable_prefix_caching = false;
  const Outcome ref = run_all(*model, ref_cfg, reqs, false);
  EXPECT_EQ(ref.stats.n_preemptions, 0u);
  // A pool of 40 uniform blocks = 120 hybrid ones: a request needs up to 25
  // positions x 3 groups before its sliding groups let go, so they preempt.
  const Outcome small = run_all(*model, config(*model, 4, 40, KvFormat::kF32, true), reqs, false);
  EXPECT_GT(small.stats.n_preemptions, 0u);
  EXPECT_GT(small.stats.prefix_cache_hits, 0u);
  expect_same_outputs(small, ref);
  // One by one: every request after the first with the prefix hits it.
  const Outcome one_by_one =
      run_all(*model, config(*model, 4, 1024, KvFormat::kF32, true), reqs, true);
  EXPECT_GT(one_by_one.stats.prefix_cache_hits, 0u);
  expect_same_outputs(one_by_one, ref);
}

TEST(EngineSlidingWindow, ALongSequenceHoldsItsWindowNotItsHistory) {
  ThreadPool pool(2);
  std::unique_ptr<Model> model = load_tiny_gemma3(pool, 6);
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(1);
  Request r;
  r.prompt = random_tokens(rng, 150, model->config().n_vocab);
  r.max_tokens = 60;
  r.ignore_eos = true;
  r.sampling = greedy();
  const std::vector<Request> reqs{r};
  const Outcome full = run_all(*model, config(*model, 4, 1024, KvFormat::kF16, false), reqs, true);
  const Outcome hybrid = run_all(*model, config(*model, 4, 1024, KvFormat::kF16, true), reqs, true);
  expect_same_outputs(hybrid, full);
  // Peak bytes: the uniform layout holds 53 blocks of 6 layers; the hybrid one
  // 53 of the 2 full layers plus, per sliding group, the few blocks of a
  // window of 8 (and of a 16-token chunk while prefilling) of 2 layers.
  const double full_bytes = double(full.stats.peak_kv_blocks_used) *
                            double(full.info.kv_cache_bytes) / full.info.n_blocks;
  const double hybrid_bytes = double(hybrid.stats.peak_kv_blocks_used) *
                              double(hybrid.info.kv_cache_bytes) / hybrid.info.n_blocks;
  EXPECT_EQ(full.stats.peak_kv_blocks_used, 53);
  EXPECT_LE(hybrid.stats.peak_kv_blocks_used, 53 + 2 * 7);
  EXPECT_LT(hybrid_bytes, 0.45 * full_bytes);
}

// q4 and kivi2 keep each open key group, and the residual_blocks() groups
// before it, in fp16 slots per tensor: with layer groups, every group's
// blocks pin their own, and a hit needs every group's last blocks' rows.
TEST(EngineSlidingWindow, ResidualFormatsBitwiseEqual) {
  ThreadPool pool(2);
  std::unique_ptr<Model> model = load_tiny_gemma3(pool, 7);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(5, model->config().n_vocab, 10);
  reqs[3].n = 2;
  reqs[3].sampling = seeded(4);
  for (KvFormat format : {KvFormat::kQ4, KvFormat::kKivi2}) {
    for (int32_t residual_blocks : {0, 1, 3}) {
      for (int32_t block_size : {4, 16}) {
        SCOPED_TRACE(::testing::Message() << kv_format_name(format) << ", W " << residual_blocks
                                          << ", block size " << block_size);
        // Room for every running sequence's residual slots in both layouts:
        // a steal turns fp16 rows lossy, and then the layouts may differ.
        EngineConfig cfg = config(*model, block_size, 16384 / block_size, format, false);
        cfg.kv_residual_blocks = residual_blocks;
        cfg.max_num_seqs = 12;
        const Outcome full = run_all(*model, cfg, reqs, false);
        cfg.sliding_window_kv = true;
        const Outcome hybrid = run_all(*model, cfg, reqs, false);
        EXPECT_EQ(hybrid.info.kv_layer_groups, 4);
        {
          SCOPED_TRACE("together");
          expect_same_outputs(hybrid, full);
        }
        EXPECT_EQ(hybrid.stats.kv_residual_steals, 0u);
        EXPECT_EQ(full.stats.kv_residual_steals, 0u);
        // One by one: hits on the shared prefix where the uniform layout has
        // them (with W = 1 and blocks of 4, neither does: the fp16 rows of
        // the block before a hit are not kept in this workload).
        const Outcome one_by_one = run_all(*model, cfg, reqs, true);
        cfg.sliding_window_kv = false;
        const Outcome uniform_one_by_one = run_all(*model, cfg, reqs, true);
        EXPECT_EQ(one_by_one.stats.prefix_cache_hits > 0,
                  uniform_one_by_one.stats.prefix_cache_hits > 0);
        EXPECT_TRUE(one_by_one.stats.prefix_cache_hits > 0 ||
                    (residual_blocks == 1 && block_size == 4));
        SCOPED_TRACE("one by one");
        expect_same_outputs(one_by_one, full);
      }
    }
  }
}

}  // namespace
}  // namespace omnibus
