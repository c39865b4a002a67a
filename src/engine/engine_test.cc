#include "engine/engine.h"

#include <gtest/gtest.h>

#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"
#include "engine/logprobs.h"
#include "kv/kv_cache_size.h"
#include "kv/kv_quant.h"
#include "kv/kv_storage.h"

namespace omnibus {
namespace {

constexpr int32_t kBlock = 4;

EngineConfig fake_config(FakeModel& m, int32_t n_blocks, int32_t budget = 512) {
  EngineConfig c;
  c.block_size = kBlock;
  c.kv_format = KvFormat::kF32;
  c.kv_cache_bytes = int64_t(m.kv_geometry(kBlock, KvFormat::kF32).bytes_per_block()) * n_blocks;
  c.max_num_batched_tokens = budget;
  c.log_startup = false;
  return c;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t len, int32_t n_vocab) {
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t& t : p) t = tok(rng);
  return p;
}

Request make_request(std::vector<int32_t> prompt, int32_t max_tokens, SamplingParams sp) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = std::move(sp);
  return r;
}

// --kv-cache-memory covers the blocks and a format's fixed residual area: the
// pool is the largest block count whose blocks plus residual fit.
TEST(Engine, KvCacheMemoryWithAResidualAreaGivesTheLargestPoolThatFits) {
  FakeModel model;
  for (KvFormat format : {KvFormat::kKivi2, KvFormat::kQ4}) {
    const KvGeometry g = model.kv_geometry(kBlock, format);
    const int64_t bb = int64_t(g.bytes_per_block());
    const int64_t fixed = int64_t(g.fixed_bytes(1 << 20));
    ASSERT_GT(fixed, 3 * bb) << "the residual area must span several blocks for this test";
    for (int64_t extra : {int64_t(0), bb / 2, bb - 1}) {
      EngineConfig c = fake_config(model, 1);
      c.kv_format = format;
      c.max_num_seqs = 64;  // the slots of 64 sequences: the geometry's default
      c.kv_cache_bytes = 300 * bb + fixed + extra;
      auto engine = Engine::create(model, c);
      ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
      const int64_t n = (*engine)->info().n_blocks;
      EXPECT_EQ(n, 300) << kv_format_name(format) << " extra " << extra;
      EXPECT_LE(n * bb + int64_t(g.fixed_bytes(n)), c.kv_cache_bytes);
    }
  }
}

// q4/kivi2: each running sequence pins 1 + window residual slots; the engine
// sizes them for --max-num-seqs sequences within half of --kv-cache-memory
// (past 64 sequences within an eighth), and runs no more sequences than they
// serve.
TEST(Engine, KiviResidualSlotsBoundTheRunningSequences) {
  FakeModel model;
  for (KvFormat format : {KvFormat::kKivi2, KvFormat::kQ4}) {
    const KvGeometry g = model.kv_geometry(kBlock, format);
    const int64_t per_seq = 1 + g.residual_blocks(), slot = int64_t(g.residual_slot_bytes());
    const int64_t transfer = int64_t(g.transfer_bytes());  // kivi2's transfer slots: off the top
    EngineConfig c = fake_config(model, 1);
    c.kv_format = format;
    c.kv_cache_bytes = transfer + 2 * 10 * per_seq * slot;  // half of it: the slots of 10 sequences
    auto e = Engine::create(model, c);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    EXPECT_EQ((*e)->info().max_num_seqs, 10) << kv_format_name(format);
    EXPECT_EQ((*e)->info().kv_cache_bytes, (*e)->info().n_blocks * int64_t(g.bytes_per_block()) +
                                               10 * per_seq * slot + transfer);
    c.max_num_seqs = 4;
    e = Engine::create(model, c);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ((*e)->info().max_num_seqs, 4) << kv_format_name(format);
    c.max_num_seqs = 256;
    c.kv_cache_bytes = transfer + 1000 * per_seq * slot;
    e = Engine::create(model, c);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ((*e)->info().max_num_seqs, 1000 / 8) << kv_format_name(format);  // past 64: an eighth
    c.kv_cache_bytes = transfer + 200 * per_seq * slot;  // half: 100, an eighth: 25 -> 64
    e = Engine::create(model, c);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ((*e)->info().max_num_seqs, kResidualSeqsAlways) << kv_format_name(format);
    c.kv_cache_bytes = transfer + 100 * per_seq * slot;  // half: 50, an eighth: 12
    e = Engine::create(model, c);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ((*e)->info().max_num_seqs, 50) << kv_format_name(format);
    c.kv_cache_bytes = 0;  // the default pool: slots for all --max-num-seqs
    e = Engine::create(model, c);
    ASSERT_TRUE(e.is_ok());
    EXPECT_EQ((*e)->info().max_num_seqs, 256) << kv_format_name(format);
  }
  EngineConfig f16 = fake_config(model, 100);
  f16.max_num_seqs = 256;
  auto e = Engine::create(model, f16);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ((*e)->info().max_num_seqs, 256);
}

TEST(Engine, OneGreedyRequestMatchesTheSequenceRunner) {
  FakeModel model;
  FakeModel ref_model;  // the engine's model belongs to its thread
  auto engine = Engine::create(model, fake_config(model, 64));
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  auto stream = (*engine)->submit(make_request(prompt, 12, greedy()));
  ASSERT_TRUE(stream.is_ok());
  std::vector<EngineEvent> events;
  auto out = collect(**stream, &events);
  const SeqResult ref = reference_generate(ref_model, prompt, 12, greedy());
  EXPECT_EQ(out[0].tokens, ref.tokens);
  EXPECT_EQ(out[0].finish, FinishReason::kLength);
  ASSERT_EQ(events.size(), 12u);
  EXPECT_TRUE(events.back().final);
  EXPECT_EQ(events.back().n_prompt_tokens, 8);
  EXPECT_EQ(events.back().n_output_tokens, 12);
  EXPECT_GE(events.front().time, (*stream)->submit_time());
}

// 32 requests at once through small chunks and steps shared by many
// sequences give the tokens and bitwise the logits of each run alone.
TEST(Engine, ConcurrentRequestsMatchRunsAlone) {
  FakeModel model;
  FakeModel ref_model;  // the engine's model belongs to its thread
  std::mt19937 rng(7);
  for (int32_t budget : {16, 37, 64}) {
    std::mutex mu;
    std::map<std::pair<uint64_t, int32_t>, std::vector<std::vector<float>>> rows;
    EngineConfig cfg = fake_config(model, 1024, budget);
    cfg.on_logits = [&](uint64_t id, int32_t seq, int32_t, std::span<const float> l) {
      std::lock_guard<std::mutex> lock(mu);
      rows[{id, seq}].emplace_back(l.begin(), l.end());
    };
    auto engine = Engine::create(model, cfg);
    ASSERT_TRUE(engine.is_ok());
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int32_t> lens;
    std::vector<std::shared_ptr<RequestStream>> streams;
    {
      ForwardHold hold(&model);  // all 32 queued before any step
      for (int i = 0; i < 32; ++i) {
        prompts.push_back(random_prompt(rng, 1 + int32_t(rng() % 40), 64));
        lens.push_back(1 + int32_t(rng() % 20));
        auto s = (*engine)->submit(make_request(prompts.back(), lens.back(), greedy()));
        ASSERT_TRUE(s.is_ok());
        streams.push_back(*s);
      }
    }
    for (int i = 0; i < 32; ++i) {
      auto out = collect(*streams[size_t(i)]);
      const SeqResult ref =
          reference_generate(ref_model, prompts[size_t(i)], lens[size_t(i)], greedy());
      EXPECT_EQ(out[0].tokens, ref.tokens) << "request " << i << " budget " << budget;
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(rows[std::make_pair(streams[size_t(i)]->id(), 0)], ref.logits) << "request " << i;
    }
    EXPECT_GT((*engine)->stats().mean_batch_size, 1.5);
  }
}

// A pool too small for every request at once forces preemptions; recomputed
// sequences continue exactly where they were (seeded sampling included).
TEST(Engine, PreemptionAndResumeGiveIdenticalOutput) {
  FakeModel model;
  FakeModel ref_model;                            // the engine's model belongs to its thread
  EngineConfig cfg = fake_config(model, 16, 64);  // 64 slots; each request needs 24
  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok());
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    ForwardHold hold(&model);  // all 8 queued before any step: they must compete for the pool
    for (int i = 0; i < 8; ++i) {
      prompts.push_back(random_prompt(rng, 8, 64));
      auto s = (*engine)->submit(make_request(prompts.back(), 16, seeded(100 + uint64_t(i), 0.8f)));
      ASSERT_TRUE(s.is_ok());
      streams.push_back(*s);
    }
  }
  for (int i = 0; i < 8; ++i) {
    auto out = collect(*streams[size_t(i)]);
    const SeqResult ref =
        reference_generate(ref_model, prompts[size_t(i)], 16, seeded(100 + uint64_t(i), 0.8f));
    EXPECT_EQ(out[0].tokens, ref.tokens) << "request " << i;
  }
  EXPECT_GT((*engine)->stats().n_preemptions, 0u);
}

// n > 1: the completions share the prompt's blocks and diverge by
// copy-on-write (prompt of 10 tokens: its last block is partly filled).
TEST(Engine, ParallelSamplingMatchesIndependentSeeds) {
  FakeModel model;
  FakeModel ref_model;  // the engine's model belongs to its thread
  auto engine = Engine::create(model, fake_config(model, 64, 16));
  ASSERT_TRUE(engine.is_ok());
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Request req = make_request(prompt, 10, seeded(123));
  req.n = 4;
  auto stream = (*engine)->submit(req);
  ASSERT_TRUE(stream.is_ok());
  auto out = collect(**stream);
  ASSERT_EQ(out.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (int32_t i = 0; i < 4; ++i) {
    const SeqResult ref = reference_generate(ref_model, prompt, 10, seeded(123 + uint64_t(i)));
    EXPECT_EQ(out[i].tokens, ref.tokens) << "sequence " << i;
    EXPECT_EQ(out[i].finish, FinishReason::kLength);
    distinct.insert(out[i].tokens);
  }
  EXPECT_GT(distinct.size(), 1u);
  // The prompt was computed once: 10 prompt tokens + 4 * 9 decodes. (Stats are
  // published after the step whose events ended the request: wait for them.)
  const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->n_requests_finished, 1u);
  EXPECT_EQ(st->n_tokens_processed, 10u + 4u * 9u);
}

TEST(Engine, AbortFreesBlocksWithinOneStep) {
  FakeModel model;
  model.set_step_delay(std::chrono::milliseconds(2));  // 4000 tokens take several seconds
  auto engine = Engine::create(model, fake_config(model, 4096));
  ASSERT_TRUE(engine.is_ok());
  Request req = make_request(std::vector<int32_t>(30, 5), 4000, greedy());
  req.n = 3;
  auto stream = (*engine)->submit(req);
  ASSERT_TRUE(stream.is_ok());
  ASSERT_TRUE((*stream)->pop(std::chrono::seconds(30)).has_value());  // it is running
  (*engine)->abort((*stream)->id());
  std::vector<EngineEvent> events;
  auto out = collect(**stream, &events);
  ASSERT_EQ(out.size(), 3u);
  for (auto& [i, r] : out) EXPECT_EQ(r.finish, FinishReason::kAbort) << i;
  EXPECT_EQ(events.back().token, -1);
  const uint64_t steps_at_abort = (*engine)->stats().n_steps;
  // Blocks are freed before the abort events are pushed; the stats catch up
  // by the end of that loop iteration.
  const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kv_blocks_used, 0);
  EXPECT_EQ(st->n_running, 0);
  EXPECT_LE(st->n_steps, steps_at_abort + 1);
  (*engine)->abort((*stream)->id());  // already finished: ignored
  (*engine)->abort(987654);           // unknown: ignored
}

TEST(Engine, StopConditions) {
  FakeModel model;
  FakeModel ref_model;  // the engine's model belongs to its thread
  const std::vector<int32_t> prompt = {9, 8, 7};
  const SeqResult ref = reference_generate(ref_model, prompt, 12, greedy());
  // The first token whose first appearance is at index >= 2 plays EOG.
  size_t at = 2;
  while (std::find(ref.tokens.begin(), ref.tokens.begin() + long(at), ref.tokens[at]) !=
         ref.tokens.begin() + long(at)) {
    ++at;
  }
  ASSERT_LT(at, ref.tokens.size());
  const int32_t eog = ref.tokens[at];
  EngineConfig cfg = fake_config(model, 64);
  cfg.eog_ids = {eog};
  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok());
  auto run = [&](Request r) { return collect(**(*engine)->submit(std::move(r)))[0]; };

  SeqResult r = run(make_request(prompt, 12, greedy()));
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + long(at) + 1));

  Request ignore = make_request(prompt, 12, greedy());
  ignore.ignore_eos = true;
  r = run(ignore);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.tokens, ref.tokens);

  Request min_tokens = make_request(prompt, 12, greedy());
  min_tokens.min_tokens = int32_t(at) + 1;
  r = run(min_tokens);
  ASSERT_GT(r.tokens.size(), at);
  EXPECT_NE(r.tokens[at], eog);  // suppressed until min_tokens
  EXPECT_EQ(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + long(at)),
            std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + long(at)));

  Request stop_ids = make_request(prompt, 12, greedy());
  stop_ids.stop_token_ids = {ref.tokens[0]};
  stop_ids.ignore_eos = true;
  r = run(stop_ids);
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.tokens, std::vector<int32_t>{ref.tokens[0]});
}

TEST(Engine, RejectsBadRequestsAtSubmit) {
  FakeModel model(64, 100);  // n_ctx_train 100
  auto engine = Engine::create(model, fake_config(model, 256));
  ASSERT_TRUE(engine.is_ok());
  EXPECT_EQ((*engine)->info().max_model_len, 100);
  auto too_long = (*engine)->submit(make_request(std::vector<int32_t>(90, 1), 11, greedy()));
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("maximum context length is 100 tokens"),
            std::string::npos)
      << too_long.status().message();
  EXPECT_TRUE((*engine)->submit(make_request(std::vector<int32_t>(90, 1), 10, greedy())).is_ok());
  EXPECT_FALSE((*engine)->submit(make_request({}, 10, greedy())).is_ok());
  EXPECT_FALSE((*engine)->submit(make_request({64}, 10, greedy())).is_ok());
  EXPECT_FALSE((*engine)->submit(make_request({1}, 0, greedy())).is_ok());
  SamplingParams bad = greedy();
  bad.top_p = 0.0f;
  EXPECT_FALSE((*engine)->submit(make_request({1}, 4, bad)).is_ok());
  Request n0 = make_request({1}, 4, greedy());
  n0.n = 0;
  EXPECT_FALSE((*engine)->submit(n0).is_ok());
}

TEST(Engine, RejectsAPoolSmallerThanTheConfiguredContext) {
  FakeModel model;
  EngineConfig cfg = fake_config(model, 8);  // 32 slots
  cfg.max_model_len = 64;
  EXPECT_FALSE(Engine::create(model, cfg).is_ok());
  cfg.max_model_len = 0;
  auto engine = Engine::create(model, cfg);
  ASSERT_TRUE(engine.is_ok());
  EXPECT_EQ((*engine)->info().max_model_len, 32);  // capped to the pool
}

TEST(Engine, PromptLogprobs) {
  FakeModel model;
  FakeModel ref_model;  // the engine's model belongs to its thread
  auto engine = Engine::create(model, fake_config(model, 64, 8));  // the prompt takes 3 chunks
  ASSERT_TRUE(engine.is_ok());
  const std::vector<int32_t> prompt = {5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13};
  Request req = make_request(prompt, 3, greedy());
  req.prompt_logprobs = 2;
  std::vector<EngineEvent> events;
  auto out = collect(**(*engine)->submit(req), &events);
  ASSERT_EQ(events.size(), 3u);
  const std::vector<PromptLogprob>& lp = events[0].prompt_logprobs;
  ASSERT_EQ(lp.size(), prompt.size() - 1);
  auto runner = SequenceRunner::create(ref_model, 64, KvFormat::kF32);
  auto all = (*runner)->eval(prompt, /*all_logits=*/true);
  ASSERT_TRUE(all.is_ok());
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const PromptLogprob want = token_logprob(all->data() + i * 64, 64, prompt[i + 1], 2);
    EXPECT_EQ(lp[i].token, prompt[i + 1]);
    EXPECT_EQ(lp[i].logprob, want.logprob) << i;
    EXPECT_EQ(lp[i].top_logprobs, want.top_logprobs) << i;
    EXPECT_EQ(lp[i].rank, want.rank) << i;
    EXPECT_LE(lp[i].logprob, 0.0f);
  }
  EXPECT_EQ(out[0].tokens, reference_generate(ref_model, prompt, 3, greedy()).tokens);
  EXPECT_TRUE(events[1].prompt_logprobs.empty());
}

// The prompt logits sink sees every prompt position's full logits once, in
// order, across prefill chunks, and they are the model's.
TEST(Engine, PromptLogitsSinkSeesEveryPositionOnceInOrder) {
  struct Recorder final : PromptLogitsSink {
    std::vector<int32_t> positions;
    std::vector<std::vector<float>> rows;
    void consume(int32_t p, std::span<const float> logits) override {
      positions.push_back(p);
      rows.emplace_back(logits.begin(), logits.end());
    }
  };
  FakeModel model;
  FakeModel ref_model;
  auto engine = Engine::create(model, fake_config(model, 64, 8));  // the prompt takes 3 chunks
  ASSERT_TRUE(engine.is_ok());
  const std::vector<int32_t> prompt = {5, 4, 3, 2, 1, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13};
  auto sink = std::make_shared<Recorder>();
  Request req = make_request(prompt, 2, greedy());
  req.prompt_logits_sink = sink;
  EXPECT_FALSE((*engine)->submit(req).is_ok());  // needs prompt_logprobs
  req.prompt_logprobs = 0;
  collect(**(*engine)->submit(req), nullptr);
  ASSERT_EQ(sink->positions.size(), prompt.size() - 1);
  auto runner = SequenceRunner::create(ref_model, 64, KvFormat::kF32);
  auto all = (*runner)->eval(prompt, /*all_logits=*/true);
  ASSERT_TRUE(all.is_ok());
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    EXPECT_EQ(sink->positions[i], int32_t(i));
    EXPECT_EQ(sink->rows[i], std::vector<float>(all->begin() + int64_t(i) * 64,
                                                all->begin() + int64_t(i + 1) * 64))
        << i;
  }
}

TEST(Engine, SampledLogprobsAreReported) {
  FakeModel model;
  auto engine = Engine::create(model, fake_config(model, 64));
  ASSERT_TRUE(engine.is_ok());
  SamplingParams sp = greedy();
  sp.n_logprobs = 3;
  std::vector<EngineEvent> events;
  collect(**(*engine)->submit(make_request({1, 2, 3}, 4, sp)), &events);
  ASSERT_EQ(events.size(), 4u);
  for (const EngineEvent& e : events) {
    ASSERT_EQ(e.top_logprobs.size(), 3u);
    EXPECT_EQ(e.top_logprobs[0].first, e.token);  // greedy: the best is the one taken
    EXPECT_FLOAT_EQ(e.top_logprobs[0].second, e.logprob);
  }
}

// n > 1 aborted while sequence 0 still computes the prompt: the other
// sequences, not forked yet, are not the scheduler's, and end aborted too.
TEST(Engine, AbortBeforeTheForkEndsEverySequence) {
  FakeModel model;
  model.set_step_delay(std::chrono::milliseconds(2));
  auto engine =
      Engine::create(model, fake_config(model, 4096, /*budget=*/16));  // many prompt steps
  ASSERT_TRUE(engine.is_ok());
  Request req = make_request(std::vector<int32_t>(600, 5), 8, greedy());
  req.n = 3;
  auto stream = (*engine)->submit(req);
  ASSERT_TRUE(stream.is_ok());
  ASSERT_TRUE((*engine)->wait_for_step(2, std::chrono::seconds(30)).has_value());  // mid-prompt
  (*engine)->abort((*stream)->id());
  auto out = collect(**stream);
  ASSERT_EQ(out.size(), 3u);
  for (auto& [i, r] : out) {
    EXPECT_EQ(r.finish, FinishReason::kAbort) << i;
    EXPECT_TRUE(r.tokens.empty()) << i;
  }
  const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kv_blocks_used, 0);
}

TEST(Engine, ShutdownAbortsOutstandingRequests) {
  FakeModel model;
  model.set_step_delay(std::chrono::milliseconds(2));
  std::shared_ptr<RequestStream> stream;
  {
    auto engine = Engine::create(model, fake_config(model, 1024));
    ASSERT_TRUE(engine.is_ok());
    stream = *(*engine)->submit(make_request({1, 2, 3}, 4000, greedy()));
  }
  auto out = collect(*stream);
  EXPECT_EQ(out[0].finish, FinishReason::kAbort);
  EXPECT_TRUE(stream->done());
}

// wait_for_step and wait_idle return once the engine thread has published
// what they wait for, and not before: while the model is held no step can
// finish, so both time out; once released they return that step's stats.
TEST(Engine, WaitForStepAndWaitIdleAreHandshakes) {
  FakeModel model;
  auto engine = Engine::create(model, fake_config(model, 64));
  ASSERT_TRUE(engine.is_ok());
  const std::optional<EngineStats> fresh = (*engine)->wait_idle(std::chrono::seconds(60));
  ASSERT_TRUE(fresh.has_value());  // nothing submitted: idle at once
  EXPECT_EQ(fresh->n_steps, 0u);

  ForwardHold hold(&model);
  auto stream = (*engine)->submit(make_request({1, 2, 3}, 5, greedy()));
  ASSERT_TRUE(stream.is_ok());
  // Submitted, however far the engine thread has got: not idle.
  EXPECT_FALSE((*engine)->wait_idle(std::chrono::milliseconds(20)).has_value());
  EXPECT_FALSE((*engine)->wait_for_step(1, std::chrono::milliseconds(20)).has_value());
  hold.release();

  const std::optional<EngineStats> two = (*engine)->wait_for_step(2, std::chrono::seconds(60));
  ASSERT_TRUE(two.has_value());
  EXPECT_GE(two->n_steps, 2u);
  const std::optional<EngineStats> idle = (*engine)->wait_idle(std::chrono::seconds(60));
  ASSERT_TRUE(idle.has_value());
  EXPECT_TRUE((*stream)->done());  // the final event was pushed before the stats
  EXPECT_EQ(idle->n_requests_finished, 1u);
  EXPECT_EQ(idle->n_steps, 5u);  // the prompt with the first token, then 4 decodes
  EXPECT_EQ(idle->n_tokens_generated, 5u);
  EXPECT_EQ(idle->n_running, 0);
  EXPECT_EQ(idle->n_waiting, 0);
  EXPECT_EQ(idle->kv_blocks_used, 0);
  // Step 6 never comes while nothing is submitted.
  EXPECT_FALSE((*engine)->wait_for_step(6, std::chrono::milliseconds(20)).has_value());
}

TEST(Engine, ManyClientThreads) {
  FakeModel model;
  auto engine = Engine::create(model, fake_config(model, 128, 32));
  ASSERT_TRUE(engine.is_ok());
  std::vector<std::thread> clients;
  std::atomic<int> mismatches{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < 6; ++i) {
        const std::vector<int32_t> prompt = {c, i, c + i, 7};
        auto s = (*engine)->submit(make_request(prompt, 8, greedy()));
        if (!s.is_ok()) {
          ++mismatches;
          continue;
        }
        if (i == 5) (*engine)->abort((*s)->id());
        auto out = collect(**s);
        if (i < 5 && out[0].tokens.size() != 8) ++mismatches;
        (*engine)->stats();
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace omnibus
