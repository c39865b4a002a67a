// Tests only: run a list of requests through one Engine and keep everything
// it produced (tokens, the logits each token was sampled from, cached-token
// counts, stats), and compare two such runs bit for bit. The A/B harness of
// the prefix-cache and sliding-window KV tests: a feature on must give
// exactly what it gives off.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"

namespace omnibus {

// Everything one engine run produced, by request (submission order).
struct Outcome {
  std::vector<std::map<int32_t, SeqResult>> results;                             // [request][seq]
  std::map<std::pair<size_t, int32_t>, std::vector<std::vector<float>>> logits;  // (request, seq)
  std::vector<int32_t> n_cached;                                                 // [request]
  EngineStats stats;  // once idle (the engine checked its KV cache's integrity then)
  EngineInfo info;
};

// sequential: each request runs to completion before the next is submitted;
// otherwise all are submitted first (a FakeModel runs no step before that).
inline Outcome run_all(Model& model, EngineConfig cfg, const std::vector<Request>& reqs,
                       bool sequential) {
  std::mutex mu;
  std::map<uint64_t, size_t> index_of;
  Outcome out;
  cfg.on_logits = [&](uint64_t id, int32_t seq, int32_t, std::span<const float> l) {
    std::lock_guard<std::mutex> lock(mu);
    out.logits[{index_of.at(id), seq}].emplace_back(l.begin(), l.end());
  };
  auto engine = Engine::create(model, cfg);
  EXPECT_TRUE(engine.is_ok()) << engine.status().to_string();
  if (!engine.is_ok()) return out;
  out.info = (*engine)->info();
  std::vector<std::shared_ptr<RequestStream>> streams;
  out.results.resize(reqs.size());
  out.n_cached.resize(reqs.size());
  auto drain = [&](size_t i) {
    std::vector<EngineEvent> events;
    out.results[i] = collect(*streams[i], &events);
    out.n_cached[i] = events.empty() ? -1 : events.front().n_cached_tokens;
    for (const EngineEvent& e : events) EXPECT_EQ(e.n_cached_tokens, out.n_cached[i]);
  };
  ForwardHold hold(sequential ? nullptr : dynamic_cast<FakeModel*>(&model));
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::unique_lock<std::mutex> lock(mu);  // on_logits must find the id
    auto s = (*engine)->submit(reqs[i]);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    index_of[(*s)->id()] = i;
    lock.unlock();
    streams.push_back(*s);
    if (sequential) drain(i);
  }
  hold.release();
  if (!sequential) {
    for (size_t i = 0; i < reqs.size(); ++i) drain(i);
  }
  // The stats are published after the step whose events finished the requests.
  const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(60));
  EXPECT_TRUE(st.has_value());
  if (st) out.stats = *st;
  EXPECT_EQ(out.stats.n_requests_finished, reqs.size());
  return out;
}

// Same tokens and finish reasons, and bitwise the same logits, request by
// request and sequence by sequence.
inline void expect_same_outputs(const Outcome& on, const Outcome& off) {
  ASSERT_EQ(on.results.size(), off.results.size());
  for (size_t i = 0; i < on.results.size(); ++i) {
    ASSERT_EQ(on.results[i].size(), off.results[i].size()) << "request " << i;
    for (const auto& [seq, r] : off.results[i]) {
      EXPECT_EQ(on.results[i].at(seq).tokens, r.tokens) << "request " << i << " seq " << seq;
      EXPECT_EQ(on.results[i].at(seq).finish, r.finish) << "request " << i << " seq " << seq;
    }
  }
  ASSERT_EQ(on.logits.size(), off.logits.size());
  for (const auto& [key, rows] : off.logits) {
    const auto& other = on.logits.at(key);
    ASSERT_EQ(other.size(), rows.size());
    for (size_t t = 0; t < rows.size(); ++t) {
      ASSERT_TRUE(other[t] == rows[t]) << "request " << key.first << " seq " << key.second
                                       << " token " << t << ": logits differ";
    }
  }
}

}  // namespace omnibus
