#include "kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace omnibus {
namespace {

TEST(ThreadPoolTest, ZeroMeansHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_GE(pool.n_threads(), 1);
  const unsigned hc = std::thread::hardware_concurrency();
  if (hc > 0) {
    EXPECT_EQ(pool.n_threads(), static_cast<int>(hc));
  }
}

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int n_threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(n_threads);
    for (int64_t n_tasks : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(n_tasks);
      std::atomic<bool> bad_thread{false};
      pool.parallel_for(n_tasks, [&](int64_t t, int thread) {
        if (thread < 0 || thread >= n_threads) bad_thread = true;
        hits[t].fetch_add(1);
      });
      EXPECT_FALSE(bad_thread);
      for (int64_t t = 0; t < n_tasks; ++t) {
        ASSERT_EQ(hits[t].load(), 1)
            << "threads " << n_threads << " tasks " << n_tasks << " t " << t;
      }
    }
  }
}

TEST(ThreadPoolTest, ManySuccessiveJobs) {
  ThreadPool pool(4);
  std::vector<int64_t> out(37);
  for (int job = 0; job < 2000; ++job) {
    // Plain (non-atomic) writes: each slot is written by exactly one task, and
    // parallel_for's join must make them visible to the caller.
    pool.parallel_for(static_cast<int64_t>(out.size()),
                      [&](int64_t t, int) { out[t] = job * 100 + t; });
    for (size_t t = 0; t < out.size(); ++t) ASSERT_EQ(out[t], job * 100 + static_cast<int64_t>(t));
  }
}

TEST(ThreadPoolTest, JobsAfterWorkersFellAsleep) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    // Lets the workers fall asleep: the state under test, not a wait for progress.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int> sum{0};
    pool.parallel_for(100, [&](int64_t t, int) { sum += static_cast<int>(t); });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPoolTest, UsesSeveralThreadsForSlowTasks) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> per_thread(4);
  pool.parallel_for(64, [&](int64_t, int thread) {
    per_thread[thread]++;
    std::this_thread::sleep_for(std::chrono::microseconds(500));  // a slow task, not a wait
  });
  int used = 0, total = 0;
  for (auto& c : per_thread) {
    used += c.load() > 0;
    total += c.load();
  }
  EXPECT_EQ(total, 64);
  EXPECT_GE(used, 2);
}

TEST(ThreadPoolTest, NestedCallRunsInline) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(8 * 8);
  pool.parallel_for(8, [&](int64_t outer, int) {
    pool.parallel_for(8, [&](int64_t inner, int thread) {
      EXPECT_EQ(thread, 0);
      hits[outer * 8 + inner]++;
    });
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, DestroyWhileIdleAndRightAfterJob) {
  for (int i = 0; i < 50; ++i) {
    auto pool = std::make_unique<ThreadPool>(4);
    if (i % 2) {
      std::atomic<int> n{0};
      pool->parallel_for(16, [&](int64_t, int) { n++; });
      EXPECT_EQ(n.load(), 16);
    }
    pool.reset();
  }
  auto pool = std::make_unique<ThreadPool>(3);
  // Lets the workers fall asleep (the state under test, not a wait for progress).
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  pool.reset();
}

}  // namespace
}  // namespace omnibus
