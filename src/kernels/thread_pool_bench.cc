// Fork-join latency of ThreadPool::parallel_for: one job of n_threads empty
// tasks per iteration (what a decode step pays ~250 times), and the inline
// path of a one-task job.
#include <benchmark/benchmark.h>

#include <atomic>

#include "kernels/thread_pool.h"

namespace omnibus {
namespace {

void BM_ForkJoin(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  const std::function<void(int64_t, int)> fn = [&](int64_t t, int) {
    sink.fetch_add(t, std::memory_order_relaxed);
  };
  for (auto _ : state) pool.parallel_for(pool.n_threads(), fn);
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_ForkJoin)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime();

void BM_ForkJoinManyTasks(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  const std::function<void(int64_t, int)> fn = [&](int64_t t, int) {
    sink.fetch_add(t, std::memory_order_relaxed);
  };
  for (auto _ : state) pool.parallel_for(256, fn);
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_ForkJoinManyTasks)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime();

void BM_Inline(benchmark::State& state) {
  ThreadPool pool(4);
  int64_t sink = 0;
  const std::function<void(int64_t, int)> fn = [&](int64_t t, int) { sink += t; };
  for (auto _ : state) pool.parallel_for(1, fn);
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_Inline);

}  // namespace
}  // namespace omnibus
