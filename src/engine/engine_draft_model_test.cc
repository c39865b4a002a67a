// Draft-model speculation through the engine (engine/draft_model.h): outputs,
// logprobs and finishes are plain decoding's, token for token, whether the
// draft model is the target itself (greedy guesses all accepted), another
// model with the same vocabulary (mostly rejected), or starved of KV; the
// draft model's forwards are batched across sequences and counted.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/speculation_testing.h"
#include "kernels/thread_pool.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

using namespace speculation_testing;  // NOLINT(google-build-using-namespace)

EngineConfig draft_config(Model& target, Model& draft, int32_t budget, int32_t k = 4,
                          KvFormat format = KvFormat::kF16) {
  EngineConfig c = base_config(target, format, 256, budget);
  c.speculative.kind = SpeculativeKind::kDraft;
  c.speculative.num_speculative_tokens = k;
  c.draft_model = &draft;
  return c;
}

// Another tiny Llama with the target's vocabulary: one layer, other weights.
std::unique_ptr<Model> load_other_draft(ThreadPool& pool) {
  TinyLlamaSpec spec;
  spec.n_ctx = 256;
  spec.n_layer = 1;
  return load_gguf_bytes(make_tiny_llama_gguf(spec, 77), "tiny-draft.gguf", pool);
}

TEST(EngineDraftModel, TheTargetAsItsOwnDraftAcceptsEveryGreedyGuess) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 12);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, nullptr);
  const RunResult spec = run(*model, draft_config(*model, *model, 512), reqs, nullptr);
  ASSERT_EQ(spec.info.speculative, SpeculativeKind::kDraft);
  expect_same(spec.out, plain.out);
  EXPECT_GT(spec.stats.spec_draft_tokens, 0u);
  EXPECT_GT(spec.stats.spec_draft_model_forwards, 0u);
  EXPECT_GE(spec.stats.spec_draft_model_guesses, spec.stats.spec_draft_tokens);
  EXPECT_GT(spec.stats.spec_draft_model_seconds, 0.0);
  EXPECT_LT(spec.stats.n_steps, plain.stats.n_steps);
  // Greedy guesses of the target itself: a greedy request rejects none (the
  // sampled requests reject some), so at least half of all are accepted.
  EXPECT_GT(2 * spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens);

  // Greedy only: every guess is accepted.
  std::vector<Request> greedy_reqs = reqs;
  for (Request& r : greedy_reqs) {
    r.sampling = greedy();
    r.n = 1;
  }
  const RunResult g_plain =
      run(*model, base_config(*model, KvFormat::kF16, 256, 512), greedy_reqs, nullptr);
  const RunResult g_spec = run(*model, draft_config(*model, *model, 512), greedy_reqs, nullptr);
  expect_same(g_spec.out, g_plain.out);
  EXPECT_EQ(g_spec.stats.spec_accepted_tokens, g_spec.stats.spec_draft_tokens);
  // Batched: fewer draft forwards than guesses (12 sequences draft together).
  EXPECT_LT(g_spec.stats.spec_draft_model_forwards, g_spec.stats.spec_draft_model_guesses);
}

TEST(EngineDraftModel, AnotherModelsGuessesChangeNothing) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  const std::unique_ptr<Model> draft = load_other_draft(pool);
  ASSERT_NE(model, nullptr);
  ASSERT_NE(draft, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 14);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, nullptr);
  for (int32_t budget : {512, 24}) {  // chunked prompts beside verification steps
    SCOPED_TRACE(::testing::Message() << "budget " << budget);
    const RunResult spec = run(*model, draft_config(*model, *draft, budget), reqs, nullptr);
    expect_same(spec.out, plain.out);
    EXPECT_GT(spec.stats.spec_draft_tokens, 0u);
    EXPECT_LT(spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens);
  }
}

// q4 / kivi2 targets: drafts stay inside the open KV block
// (KvCache::max_draft_in_block), the draft model's own pool is f16; outputs
// are plain decoding's.
TEST(EngineDraftModel, ResidualKvFormats) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 8);
  for (KvFormat format : {KvFormat::kQ4, KvFormat::kKivi2}) {
    SCOPED_TRACE(kv_format_name(format));
    const RunResult plain = run(*model, base_config(*model, format, 256, 512), reqs, nullptr);
    const RunResult spec = run(*model, draft_config(*model, *model, 24, 4, format), reqs, nullptr);
    expect_same(spec.out, plain.out);
    EXPECT_GT(spec.stats.spec_draft_tokens, 0u);
  }
}

// A draft pool of 3 blocks: most sequences cannot draft (or lose their draft
// KV to the ones drafting), outputs do not change, nothing leaks (the
// engine's idle integrity check runs in run()).
TEST(EngineDraftModel, AStarvedDraftPoolOnlyDraftsLess) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 10);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, nullptr);
  EngineConfig cfg = draft_config(*model, *model, 512);
  cfg.draft_kv_cache_bytes = 3 * int64_t(model->kv_geometry(16, KvFormat::kF16).bytes_per_block());
  const RunResult spec = run(*model, cfg, reqs, nullptr);
  expect_same(spec.out, plain.out);
  EXPECT_GT(spec.stats.spec_draft_tokens, 0u);
}

TEST(EngineDraftModel, PreemptionAndRecompute) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  const std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 10);
  const RunResult plain = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, nullptr);
  EngineConfig cfg = draft_config(*model, *model, 64);
  const KvGeometry g = model->kv_geometry(16, KvFormat::kF16);
  cfg.kv_cache_bytes = int64_t(g.bytes_per_block()) * 12 + int64_t(g.fixed_bytes(12));
  const RunResult spec = run(*model, cfg, reqs, nullptr);
  EXPECT_GT(spec.stats.n_preemptions, 0u);
  expect_same(spec.out, plain.out);
}

TEST(EngineDraftModel, ClearErrors) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  EngineConfig cfg = base_config(*model, KvFormat::kF16, 64, 512);
  cfg.speculative.kind = SpeculativeKind::kDraft;
  auto e = Engine::create(*model, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--draft-model"), std::string::npos) << e.status().message();
  cfg.draft_model = model.get();
  cfg.draft_kv_cache_bytes = 1;
  e = Engine::create(*model, cfg);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("--draft-kv-cache-memory"), std::string::npos)
      << e.status().message();
}

}  // namespace
}  // namespace omnibus
