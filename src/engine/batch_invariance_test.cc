// Batch invariance (issue 4, item 5): greedy outputs of 32 prompts run one at
// a time equal those of all 32 run together with small token budgets (so
// prompts are chunked and steps mix chunks and decodes of many sequences) —
// token for token, and the logits they were sampled from bitwise. On the fake
// model, a tiny random Llama (real kernels) and SmolLM2 when its file exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"
#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "kv/kv_quant.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

struct Run {
  std::vector<std::vector<int32_t>> tokens;             // [request]
  std::vector<std::vector<std::vector<float>>> logits;  // [request][token][n_vocab]
};

Run run_engine(Model& model, const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens,
               int32_t budget, bool one_at_a_time, KvFormat kv_format) {
  std::mutex mu;
  std::map<uint64_t, std::vector<std::vector<float>>> rows;
  EngineConfig cfg;
  cfg.max_num_batched_tokens = budget;
  cfg.kv_format = kv_format;
  cfg.block_size = 16;
  const KvGeometry g = model.kv_geometry(16, kv_format);
  cfg.kv_cache_bytes = int64_t(g.bytes_per_block()) * 512 + int64_t(g.fixed_bytes(512));
  cfg.log_startup = false;
  cfg.on_logits = [&](uint64_t id, int32_t, int32_t, std::span<const float> l) {
    std::lock_guard<std::mutex> lock(mu);
    rows[id].emplace_back(l.begin(), l.end());
  };
  auto engine = Engine::create(model, cfg);
  EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
  Run run;
  std::vector<std::shared_ptr<RequestStream>> streams;
  // Together: a fake model runs no step before every request is queued.
  ForwardHold hold(one_at_a_time ? nullptr : dynamic_cast<FakeModel*>(&model));
  for (const auto& p : prompts) {
    Request r;
    r.prompt = p;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling = greedy();
    auto s = (*engine)->submit(r);
    EXPECT_TRUE(s.is_ok());
    streams.push_back(*s);
    if (one_at_a_time) run.tokens.push_back(collect(*streams.back())[0].tokens);
  }
  hold.release();
  if (!one_at_a_time) {
    for (auto& s : streams) run.tokens.push_back(collect(*s)[0].tokens);
    EXPECT_GT((*engine)->stats().mean_batch_size, 2.0);
  }
  std::lock_guard<std::mutex> lock(mu);
  for (auto& s : streams) run.logits.push_back(rows[s->id()]);
  return run;
}

void expect_batch_invariant(Model& model, int32_t max_prompt, int32_t max_tokens,
                            KvFormat kv_format, std::vector<int32_t> budgets) {
  std::mt19937 rng(2024);
  const int32_t n_vocab = model.config().n_vocab;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(1 + rng() % uint32_t(max_prompt)));
    for (int32_t& t : p) t = int32_t(rng() % uint32_t(n_vocab));
    prompts.push_back(std::move(p));
  }
  const Run alone = run_engine(model, prompts, max_tokens, 512, true, kv_format);
  // The engine alone reproduces the single-sequence baseline.
  const SeqResult ref = reference_generate(model, prompts[0], max_tokens, greedy(), kv_format);
  EXPECT_EQ(alone.tokens[0], ref.tokens);
  EXPECT_TRUE(alone.logits[0] == ref.logits) << "engine alone vs SequenceRunner: logits differ";
  for (int32_t budget : budgets) {
    const Run together = run_engine(model, prompts, max_tokens, budget, false, kv_format);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(together.tokens[i], alone.tokens[i]) << "request " << i << ", budget " << budget;
      ASSERT_EQ(together.logits[i].size(), alone.logits[i].size());
      for (size_t t = 0; t < alone.logits[i].size(); ++t) {
        ASSERT_TRUE(together.logits[i][t] == alone.logits[i][t])
            << "request " << i << " token " << t << ", budget " << budget << ": logits differ";
      }
    }
  }
}

TEST(BatchInvariance, FakeModel) {
  FakeModel model;
  expect_batch_invariant(model, 60, 12, KvFormat::kF32, {16, 64});
}

TEST(BatchInvariance, TinyLlama) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  expect_batch_invariant(*model, 60, 12, KvFormat::kF16, {16, 37, 64});
  // kivi2: quantized per-channel keys, the fp16 window read from slots
  expect_batch_invariant(*model, 60, 12, KvFormat::kKivi2, {16, 37});
}

TEST(BatchInvariance, SmolLM2) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)  // see util/sanitizers.h
  GTEST_SKIP() << "too slow under a sanitizer; the release run covers it";
#endif
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_smollm2_if_present(pool);
  if (model == nullptr) {
    GTEST_SKIP() << "models/smollm2-135m.gguf not loaded (run the setup script)";
  }
  expect_batch_invariant(*model, 48, 8, KvFormat::kF16, {16, 64});
}

}  // namespace
}  // namespace omnibus
