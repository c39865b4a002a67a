// Speculative decoding through the engine (engine/speculation.h): outputs,
// logprobs and finish reasons are those of plain decoding, token for token,
// whatever the drafts are. The drafts come from an oracle that knows plain
// decoding's output and corrupts one position of most drafts, so that every
// case is exercised: whole drafts accepted, a prefix accepted, none; stop
// tokens and max_tokens inside an accepted run; chunked prompts beside
// verification steps; n > 1; preemption; the prefix cache (never a draft
// token's block); f16, q8, sliding-window KV, and q4 / kivi2 with drafts kept
// inside their open block. Then prompt lookup itself on SmolLM2.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/speculation_testing.h"
#include "kernels/thread_pool.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

using namespace speculation_testing;  // NOLINT(google-build-using-namespace)

// Plain decoding with a large budget, then speculation at `budgets`: equal.
void expect_exact(Model& model, KvFormat format, const std::vector<Request>& reqs,
                  std::vector<int32_t> budgets) {
  const RunResult plain = run(model, base_config(model, format, 256, 512), reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  for (int32_t budget : budgets) {
    SCOPED_TRACE(::testing::Message() << "budget " << budget);
    const RunResult spec = run(model, base_config(model, format, 256, budget), reqs, &oracle);
    ASSERT_EQ(spec.info.speculative, SpeculativeKind::kNgram);
    expect_same(spec.out, plain.out);
    // Every case happened: drafts accepted whole, in part, and refused.
    EXPECT_GT(spec.stats.spec_drafts, 0u);
    EXPECT_GT(spec.stats.spec_accepted_tokens, 0u);
    EXPECT_LT(spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens);
    EXPECT_GT(spec.stats.spec_accepted_per_pos[1], 0u);
    if (budget == 512) {  // the same chunks: fewer steps
      EXPECT_LT(spec.stats.n_steps, plain.stats.n_steps);
    }
  }
}

TEST(EngineSpeculation, OutputsAreThoseOfPlainDecoding) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 14);
  expect_exact(*model, KvFormat::kF16, reqs, {512, 24});
  expect_exact(*model, KvFormat::kQ8, reqs, {40});
}

TEST(EngineSpeculation, SlidingWindowKv) {
  ThreadPool pool(2);
  TinyGemma3Spec spec;
  spec.n_layer = 6;
  spec.n_ctx = 256;
  spec.sliding_window = 8;
  spec.swa_pattern = 3;
  const std::unique_ptr<Model> model =
      load_gguf_bytes(make_tiny_gemma3_gguf(spec, 11), "tiny-gemma3.gguf", pool);
  ASSERT_NE(model, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 8);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 512, 512), reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  const RunResult spec_run =
      run(*model, base_config(*model, KvFormat::kF16, 512, 32), reqs, &oracle);
  EXPECT_GT(spec_run.info.kv_layer_groups, 1);
  expect_same(spec_run.out, plain.out);
  EXPECT_GT(spec_run.stats.spec_accepted_tokens, 0u);
}

// Stop tokens and max_tokens land inside accepted runs: the oracle drafts
// plain decoding's output past the stop, which verification never reaches.
TEST(EngineSpeculation, StopsInsideAnAcceptedRun) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 8);
  for (Request& r : reqs) r.n = 1;
  const EngineConfig cfg = base_config(*model, KvFormat::kF16, 256, 512);
  const RunResult free_run = run(*model, cfg, reqs, nullptr);
  const Oracle past_the_stop = oracle_of(reqs, free_run.out);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int32_t>& t = free_run.out[i].at(0).tokens;
    if (i % 2 == 0) reqs[i].stop_token_ids = {t[5 + i % 4]};
    if (i % 2 == 1) reqs[i].min_tokens = 3;
  }
  const RunResult plain = run(*model, cfg, reqs, nullptr);
  const RunResult spec = run(*model, cfg, reqs, &past_the_stop);
  expect_same(spec.out, plain.out);
  EXPECT_EQ(plain.out[0].at(0).finish, FinishReason::kStop);
  EXPECT_GT(spec.stats.spec_accepted_tokens, 0u);
}

// A pool so small that sequences are preempted and recomputed, drafts or not.
TEST(EngineSpeculation, PreemptionAndRecompute) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 10);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  const RunResult spec = run(*model, base_config(*model, KvFormat::kF16, 12, 64), reqs, &oracle);
  EXPECT_GT(spec.stats.n_preemptions, 0u);
  expect_same(spec.out, plain.out);
}

// Only verified tokens join the prefix cache: with every draft refused, and
// with drafts accepted, the cache holds exactly plain decoding's blocks.
TEST(EngineSpeculation, ThePrefixCacheNeverHoldsADraftToken) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 6);
  for (Request& r : reqs) {
    r.n = 1;
    r.max_tokens = 40;
  }
  const EngineConfig cfg = base_config(*model, KvFormat::kF16, 256, 512);
  const RunResult plain = run(*model, cfg, reqs, nullptr);
  Oracle wrong = oracle_of(reqs, plain.out);
  for (auto& [key, tokens] : wrong) {
    for (int32_t& t : tokens) t = (t + 3) % model->config().n_vocab;
  }
  const RunResult refused = run(*model, cfg, reqs, &wrong);
  EXPECT_GT(refused.stats.spec_draft_tokens, 0u);
  EXPECT_EQ(refused.stats.spec_accepted_tokens, 0u);
  expect_same(refused.out, plain.out);
  EXPECT_EQ(refused.cached_keys, plain.cached_keys);
  const Oracle right = oracle_of(reqs, plain.out);
  const RunResult accepted = run(*model, cfg, reqs, &right);
  EXPECT_GT(accepted.stats.spec_accepted_tokens, 0u);
  EXPECT_EQ(accepted.cached_keys, plain.cached_keys);
}

// Many seeds, short outputs: every seeded sample is the one plain decoding
// draws, so the distributions are equal (not only close).
TEST(EngineSpeculation, SeededSamplesAreUnchanged) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::mt19937 rng(5);
  const std::vector<int32_t> prompt = random_tokens(rng, 12, model->config().n_vocab);
  std::vector<Request> reqs;
  for (uint64_t seed = 0; seed < 48; ++seed) {
    Request r;
    r.prompt = prompt;
    r.prompt.push_back(2 + int32_t(seed % 5));  // distinct prompts: the oracle's key
    r.max_tokens = 6;
    r.ignore_eos = true;
    r.sampling = seeded(seed, 1.2f);
    reqs.push_back(std::move(r));
  }
  const EngineConfig cfg = base_config(*model, KvFormat::kF16, 256, 512);
  const RunResult plain = run(*model, cfg, reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  const RunResult spec = run(*model, cfg, reqs, &oracle);
  expect_same(spec.out, plain.out);
}

// q4 and kivi2 keep each block's open group in fp16 (a residual slot) and
// quantize it when it fills: a draft there stays inside its block, short of
// its last two slots (KvCache::max_draft_in_block), so a refused guess only
// leaves fp16 rows the next writes replace. Outputs equal plain decoding's,
// with the default residual windows and wider ones.
TEST(EngineSpeculation, ResidualFormatsDraftInsideTheOpenBlock) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 10);
  for (KvFormat format : {KvFormat::kQ4, KvFormat::kKivi2}) {
    for (int32_t window : {-1, 2}) {  // -1: the format's default
      SCOPED_TRACE(::testing::Message() << kv_format_name(format) << " window " << window);
      EngineConfig cfg = base_config(*model, format, 256, 512);
      if (window >= 0) cfg.kv_residual_blocks = window;
      const RunResult plain = run(*model, cfg, reqs, nullptr);
      const Oracle oracle = oracle_of(reqs, plain.out);
      cfg.max_num_batched_tokens = 40;  // chunked prompts beside verification steps
      const RunResult spec = run(*model, cfg, reqs, &oracle);
      ASSERT_EQ(spec.info.speculative, SpeculativeKind::kNgram);
      expect_same(spec.out, plain.out);
      EXPECT_GT(spec.stats.spec_accepted_tokens, 0u);
      EXPECT_LT(spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens);
    }
  }
}

TEST(EngineSpeculation, OffWhereAsked) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 4);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  for (Request& r : reqs) r.speculative = false;
  const RunResult off = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, &oracle);
  EXPECT_EQ(off.info.speculative, SpeculativeKind::kNgram);
  EXPECT_EQ(off.stats.spec_drafts, 0u);
  expect_same(off.out, plain.out);
}

// The back-off: when a draft token costs more than a decode's share of the
// step (a compute-bound step: cost ratio >= 1), nothing is drafted; at a
// middling ratio, drafts are shorter than in a memory-bound step; the
// outputs never change.
TEST(EngineSpeculation, BacksOffAsDraftTokensGetDear) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 4);
  EngineConfig cfg = base_config(*model, KvFormat::kF16, 256, 512);
  const RunResult plain = run(*model, cfg, reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  const RunResult cheap = run(*model, cfg, reqs, &oracle);
  cfg.spec_cost_ratio_for_testing = 0.45;
  const RunResult middling = run(*model, cfg, reqs, &oracle);
  cfg.spec_cost_ratio_for_testing = 1.5;
  const RunResult dear = run(*model, cfg, reqs, &oracle);
  expect_same(middling.out, plain.out);
  expect_same(dear.out, plain.out);
  ASSERT_GT(cheap.stats.spec_drafts, 0u);
  EXPECT_LT(middling.stats.spec_draft_tokens, cheap.stats.spec_draft_tokens);
  EXPECT_EQ(dear.stats.spec_drafts, 0u);
}

// Prompt lookup itself, on a real model and a prompt that repeats: greedy
// output unchanged, most drafts accepted, fewer steps.
TEST(EngineSpeculation, PromptLookupOnSmolLM2) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)  // see util/sanitizers.h
  GTEST_SKIP() << "too slow under a sanitizer; the release run covers it";
#endif
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_smollm2_if_present(pool);
  if (model == nullptr)
    GTEST_SKIP() << "models/smollm2-135m.gguf not loaded (run the setup script)";
  // A token pattern of 11 repeated 6 times: the model continues it.
  std::vector<int32_t> unit{504, 2365, 6354, 16438, 28, 9565, 690, 260, 22118, 2767, 30};
  Request r;
  for (int i = 0; i < 6; ++i) r.prompt.insert(r.prompt.end(), unit.begin(), unit.end());
  r.max_tokens = 40;
  r.sampling = greedy();
  EngineConfig cfg = base_config(*model, KvFormat::kF16, 64, 512);
  const RunResult plain = run(*model, cfg, {r}, nullptr);
  cfg.speculative.kind = SpeculativeKind::kNgram;
  const RunResult spec = run(*model, cfg, {r}, nullptr);
  expect_same(spec.out, plain.out);
  EXPECT_GT(spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens / 2);
  EXPECT_LT(spec.stats.n_steps, plain.stats.n_steps);
}

}  // namespace
}  // namespace omnibus
