#include "server/metrics.h"

#include <gtest/gtest.h>

namespace omnibus::server {
namespace {

TEST(Histogram, BucketsAreCumulativeWithInf) {
  Histogram h({0.25, 1.0});
  h.observe(0.125);
  h.observe(0.25);  // le is inclusive
  h.observe(0.5);
  h.observe(8.0);
  std::string out;
  h.render("x", "m=\"a\"", out);
  EXPECT_EQ(out,
            "x_bucket{m=\"a\",le=\"0.25\"} 2\n"
            "x_bucket{m=\"a\",le=\"1\"} 3\n"
            "x_bucket{m=\"a\",le=\"+Inf\"} 4\n"
            "x_sum{m=\"a\"} 8.875\n"
            "x_count{m=\"a\"} 4\n");
}

TEST(ServerMetrics, RendersEngineGaugesCountersAndHistograms) {
  ServerMetrics m("smol\"lm");
  m.add_prompt_tokens(10);
  m.add_generation_tokens(3);
  m.add_generation_tokens(2);
  m.count_finished("stop");
  m.count_finished("length");
  m.count_finished("length");
  m.observe_ttft(0.2);
  const EngineStats st{.n_running = 3,
                       .n_waiting = 1,
                       .kv_blocks_used = 25,
                       .kv_blocks_total = 100,
                       .n_preemptions = 7,
                       .kv_residual_steals = 4};
  const std::string t = m.render(st);
  const std::string l = "{model_name=\"smol\\\"lm\"}";
  EXPECT_NE(t.find("# TYPE omnibus:num_requests_running gauge\nomnibus:num_requests_running" + l +
                   " 3\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("omnibus:num_requests_waiting" + l + " 1\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_cache_usage_perc" + l + " 0.25\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:num_preemptions_total" + l + " 7\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_residual_steals_total" + l + " 4\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:prompt_tokens_total" + l + " 10\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:generation_tokens_total" + l + " 5\n"), std::string::npos);
  EXPECT_NE(t.find("finished_reason=\"length\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE omnibus:time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_NE(t.find("omnibus:time_to_first_token_seconds_count{model_name=\"smol\\\"lm\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:e2e_request_latency_seconds_count"), std::string::npos);
  EXPECT_NE(t.find("omnibus:request_queue_time_seconds_bucket"), std::string::npos);
  EXPECT_NE(t.find("omnibus:time_per_output_token_seconds_sum"), std::string::npos);
  EXPECT_EQ(m.generation_tokens(), 5u);
}

// Issue 34: a grammar dead end was a "stop"; slow connections were not counted.
TEST(ServerMetrics, GrammarDeadEndsAndReadTimeoutsAreCounted) {
  ServerMetrics m("x");
  m.count_finished("grammar_dead_end");
  m.count_finished("stop");
  m.count_read_timeout(HttpReadPhase::kHeader);
  m.count_read_timeout(HttpReadPhase::kHeader);
  m.count_read_timeout(HttpReadPhase::kBody);
  const std::string t = m.render(EngineStats{});
  EXPECT_NE(t.find("finished_reason=\"grammar_dead_end\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("finished_reason=\"stop\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("finished_reason=\"abort\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:http_read_timeouts_total{model_name=\"x\",phase=\"header\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:http_read_timeouts_total{model_name=\"x\",phase=\"body\"} 1\n"),
            std::string::npos);
}

TEST(ServerMetrics, KvEventCountersOnlyWhenPublishing) {
  ServerMetrics m("x");
  EXPECT_EQ(m.render(EngineStats{}).find("kv_events"), std::string::npos);
  const std::string t = m.render(EngineStats{}, KvEventsCounts{12, 3});
  EXPECT_NE(t.find("# TYPE omnibus:kv_events_published_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_events_published_total{model_name=\"x\"} 12\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_events_dropped_total{model_name=\"x\"} 3\n"), std::string::npos);
}

TEST(ServerMetrics, DiskTierHitsByTierSkipsAndLoadLatency) {
  ServerMetrics m("x");
  EngineStats st;
  st.prefix_cache_hits = 100;
  st.kv_disk_hit_tokens = 64;
  st.kv_disk_hit_blocks = 4;
  st.kv_disk_stored_evicted = 2;
  st.kv_disk.enabled = true;
  st.kv_disk.skipped_truncated = 1;
  st.kv_disk.load_latency_buckets[0] = 3;
  st.kv_disk.load_latency_buckets.back() = 1;
  st.kv_disk.load_latency_count = 4;
  const std::string t = m.render(st);
  const std::string l = "model_name=\"x\"";
  EXPECT_NE(t.find("omnibus:prefix_cache_tier_hits_total{" + l + ",tier=\"pool\"} 36\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("omnibus:prefix_cache_tier_hits_total{" + l + ",tier=\"disk\"} 64\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_enabled{" + l + "} 1\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_hit_blocks_total{" + l + "} 4\n"), std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_stored_blocks_total{" + l + ",source=\"evicted\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_skipped_files_total{" + l + ",reason=\"truncated\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_load_seconds_bucket{" + l + ",le=\"0.0005\"} 3\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_load_seconds_bucket{" + l + ",le=\"+Inf\"} 4\n"),
            std::string::npos);
  EXPECT_NE(t.find("omnibus:kv_disk_load_seconds_count{" + l + "} 4\n"), std::string::npos);
}

TEST(ServerMetrics, EmptyPoolReportsZeroUsage) {
  ServerMetrics m("x");
  EXPECT_NE(m.render(EngineStats{}).find("omnibus:kv_cache_usage_perc{model_name=\"x\"} 0\n"),
            std::string::npos);
}

}  // namespace
}  // namespace omnibus::server
