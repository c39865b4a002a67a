// Speculative decoding through the engine (engine/speculation.h): outputs,
// logprobs and finish reasons are those of plain decoding, token for token,
// whatever the drafts are. The drafts come from an oracle that knows plain
// decoding's output and corrupts one position of most drafts, so that every
// case is exercised: whole drafts accepted, a prefix accepted, none; stop
// tokens and max_tokens inside an accepted run; chunked prompts beside
// verification steps; n > 1; preemption; the prefix cache (never a draft
// token's block); f16, q8, sliding-window KV; formats that cannot roll back
// turn it off. Then prompt lookup itself on SmolLM2.
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
#include "kernels/thread_pool.h"
#include "model/tiny_model_testing.h"

namespace omnibus {
namespace {

struct TokenOut {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
  bool operator==(const TokenOut&) const = default;
};
using Outputs = std::vector<std::map<int32_t, TokenOut>>;  // [request][sequence]

struct RunResult {
  Outputs out;
  EngineStats stats;
  std::set<uint64_t> cached_keys;
  EngineInfo info;
};

// What plain decoding produced, by (prompt, sequence): the oracle's source.
using Oracle = std::map<std::pair<std::vector<int32_t>, int32_t>, std::vector<int32_t>>;

EngineConfig base_config(Model& model, KvFormat format, int32_t n_blocks, int32_t budget) {
  EngineConfig c;
  c.block_size = 16;
  c.kv_format = format;
  const KvGeometry g = model.kv_geometry(16, format);
  c.kv_cache_bytes = int64_t(g.bytes_per_block()) * n_blocks + int64_t(g.fixed_bytes(n_blocks));
  c.max_num_batched_tokens = budget;
  c.long_prefill_token_threshold = 8;
  c.log_startup = false;
  c.spec_cost_ratio_for_testing =
      0;  // draft lengths from acceptance alone, not this machine's timing
  return c;
}

// Runs `reqs` all at once. With `oracle`, speculation is on and each draft is
// the oracle's continuation with one position changed, chosen by where the
// sequence stands (some drafts are left whole).
RunResult run(Model& model, EngineConfig cfg, const std::vector<Request>& reqs,
              const Oracle* oracle, int32_t k = 5) {
  const int32_t n_vocab = model.config().n_vocab;
  if (oracle != nullptr) {
    cfg.speculative.kind = SpeculativeKind::kNgram;
    cfg.speculative.num_speculative_tokens = k;
    cfg.propose_for_testing = [oracle, n_vocab](std::span<const int32_t> prompt, int32_t index,
                                                std::span<const int32_t> output, int32_t k_max,
                                                std::vector<int32_t>& draft) {
      auto it = oracle->find({std::vector<int32_t>(prompt.begin(), prompt.end()), index});
      if (it == oracle->end()) return;
      const std::vector<int32_t>& ref = it->second;
      const size_t pos = output.size();
      for (size_t i = pos; i < ref.size() && draft.size() < size_t(k_max); ++i) {
        draft.push_back(ref[i]);
      }
      const size_t wrong = (pos * 7 + size_t(index)) % size_t(k_max + 2);
      if (wrong < draft.size()) draft[wrong] = (draft[wrong] + 1) % n_vocab;
    };
  }
  auto engine = Engine::create(model, cfg);
  EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
  RunResult r;
  r.info = (*engine)->info();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& q : reqs) {
    auto s = (*engine)->submit(q);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  for (auto& s : streams) {
    std::vector<EngineEvent> events;
    collect(*s, &events);
    std::map<int32_t, TokenOut> seqs;
    for (const EngineEvent& e : events) {
      TokenOut& t = seqs[e.seq_index];
      if (e.token >= 0) {
        t.tokens.push_back(e.token);
        t.logprobs.push_back(e.logprob);
      }
      if (e.finish != FinishReason::kNone) t.finish = e.finish;
    }
    r.out.push_back(std::move(seqs));
  }
  EXPECT_TRUE((*engine)->wait_idle(std::chrono::seconds(60)).has_value());  // blocks checked idle
  r.stats = (*engine)->stats();
  for (uint64_t key : (*engine)->cached_block_hashes()) r.cached_keys.insert(key);
  return r;
}

Oracle oracle_of(const std::vector<Request>& reqs, const Outputs& out) {
  Oracle o;
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (const auto& [index, t] : out[i]) o[{reqs[i].prompt, index}] = t.tokens;
  }
  return o;
}

std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n, int32_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = 2 + int32_t(rng() % uint32_t(n_vocab - 2));
  return t;
}

// Greedy and seeded (temperature, top-p, penalties), n = 2, logprobs; prompts
// of 3..60 tokens, some sharing a prefix; 12..40 tokens each.
std::vector<Request> mixed_requests(int32_t n_vocab, int32_t n) {
  std::mt19937 rng(31);
  const std::vector<int32_t> prefix = random_tokens(rng, 20, n_vocab);
  std::vector<Request> reqs;
  for (int32_t i = 0; i < n; ++i) {
    Request r;
    if (i % 3 == 0) r.prompt = prefix;
    const std::vector<int32_t> own = random_tokens(rng, 3 + int32_t(rng() % 40), n_vocab);
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.max_tokens = 12 + int32_t(rng() % 29);
    r.ignore_eos = true;
    r.sampling = i % 2 == 0 ? greedy() : seeded(1000 + uint64_t(i), 0.9f);
    if (i % 4 == 1) {
      r.sampling.top_p = 0.9f;
      r.sampling.repetition_penalty = 1.1f;
    }
    if (i % 5 == 3) r.n = 2;
    r.sampling.n_logprobs = i % 3 == 1 ? 2 : -1;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void expect_same(const Outputs& spec, const Outputs& plain) {
  ASSERT_EQ(spec.size(), plain.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    ASSERT_EQ(spec[i].size(), plain[i].size()) << "request " << i;
    for (const auto& [index, t] : plain[i]) {
      const TokenOut& s = spec[i].at(index);
      EXPECT_EQ(s.tokens, t.tokens) << "request " << i << " sequence " << index;
      EXPECT_TRUE(s.logprobs == t.logprobs) << "request " << i << ": logprobs differ";
      EXPECT_EQ(s.finish, t.finish) << "request " << i;
    }
  }
}

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

TEST(EngineSpeculation, OffWhereItCannotRollBackOrWhereAsked) {
  ThreadPool pool(2);
  const std::unique_ptr<Model> model = load_tiny_llama(pool);
  ASSERT_NE(model, nullptr);
  std::vector<Request> reqs = mixed_requests(model->config().n_vocab, 4);
  const RunResult plain =
      run(*model, base_config(*model, KvFormat::kKivi2, 256, 512), reqs, nullptr);
  const Oracle oracle = oracle_of(reqs, plain.out);
  const RunResult kivi =
      run(*model, base_config(*model, KvFormat::kKivi2, 256, 512), reqs, &oracle);
  EXPECT_EQ(kivi.info.speculative, SpeculativeKind::kNone);
  EXPECT_EQ(kivi.stats.spec_drafts, 0u);
  expect_same(kivi.out, plain.out);
  for (Request& r : reqs) r.speculative = false;
  const RunResult off = run(*model, base_config(*model, KvFormat::kF16, 256, 512), reqs, &oracle);
  EXPECT_EQ(off.info.speculative, SpeculativeKind::kNgram);
  EXPECT_EQ(off.stats.spec_drafts, 0u);
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
