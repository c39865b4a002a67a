// ThreadPool: a fixed set of persistent worker threads for data-parallel
// kernels (fork-join). The calling thread takes part as worker 0, so a pool of
// n threads starts n - 1 OS threads. Workers spin briefly between jobs (a
// decode step issues hundreds of small jobs) and then sleep on a condition
// variable, so an idle server burns no CPU.
//
// Thread-safety: parallel_for may be called from one thread at a time (the
// engine thread owns the pool); the job runs on all workers concurrently.
#pragma once

#include <cstdint>
#include <functional>

namespace omnibus {

class ThreadPool {
 public:
  // n_threads >= 1; 0 means "number of physical cores" (hardware_concurrency).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const;

  // Runs fn(task, thread) for every task in [0, n_tasks), spread over the
  // workers (thread in [0, n_threads())), and returns when all are done.
  // Tasks are handed out dynamically (atomic counter), so the mapping of
  // tasks to threads varies; results must not depend on it.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace omnibus
