// Helpers of the speculative-decoding engine tests (engine_speculation_test.cc,
// engine_draft_model_test.cc): run a set of requests through an engine and
// collect each sequence's tokens, logprobs and finish; an oracle of plain
// decoding's outputs that proposes drafts; the mixed request set; equality.
//
// Thread-safety: test code, one thread.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"

namespace omnibus::speculation_testing {

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

inline EngineConfig base_config(Model& model, KvFormat format, int32_t n_blocks, int32_t budget) {
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
inline RunResult run(Model& model, EngineConfig cfg, const std::vector<Request>& reqs,
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
  {
    // All at once for the engine too: its first step sees every request, so
    // the step counts the tests compare do not depend on how fast this
    // thread submits (a loaded machine let the engine start on the first few).
    std::promise<void> hold = (*engine)->hold_for_testing();
    for (const Request& q : reqs) {
      auto s = (*engine)->submit(q);
      EXPECT_TRUE(s.is_ok()) << s.status().to_string();
      streams.push_back(*s);
    }
    hold.set_value();
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

inline Oracle oracle_of(const std::vector<Request>& reqs, const Outputs& out) {
  Oracle o;
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (const auto& [index, t] : out[i]) o[{reqs[i].prompt, index}] = t.tokens;
  }
  return o;
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t n, int32_t n_vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = 2 + int32_t(rng() % uint32_t(n_vocab - 2));
  return t;
}

// Greedy and seeded (temperature, top-p, penalties), n = 2, logprobs; prompts
// of 3..60 tokens, some sharing a prefix; 12..40 tokens each.
inline std::vector<Request> mixed_requests(int32_t n_vocab, int32_t n) {
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

inline void expect_same(const Outputs& spec, const Outputs& plain) {
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

}  // namespace omnibus::speculation_testing
