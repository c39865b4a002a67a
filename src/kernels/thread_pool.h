// ThreadPool: a fixed set of persistent worker threads for data-parallel
// kernels (fork-join). The calling thread takes part as worker 0, so a pool of
// n threads starts n - 1 OS threads. Workers spin briefly between jobs (a
// decode step issues hundreds of small jobs) and then sleep on a condition
// variable, so an idle server burns no CPU.
//
// Protocol (thread_pool.cc): a job is published by bumping a generation
// counter; a worker that sees it joins the job (unless the caller has already
// closed it) and takes task indices from one atomic counter until it runs
// past n_tasks. The caller runs tasks too; once all are claimed it closes the
// job and waits only for the workers that joined. So a descheduled or sleeping
// worker never delays a job it took no part in, and nothing of the job
// outlives the call.
//
// Thread-safety: parallel_for may be called from one thread at a time (the
// engine thread owns the pool; a concurrent call from a second thread is an
// invariant violation and aborts). A call made from inside a running task
// (nested use) does not deadlock: it runs all its tasks inline, serially, on
// the calling thread with thread index 0 — so a nested fn must not rely on
// `thread` to pick per-thread scratch shared with the outer job.
// Destroying the pool while no job runs is safe (workers are woken and joined).
#pragma once

#include <cstdint>
#include <functional>

namespace omnibus {

class ThreadPool {
 public:
  // n_threads >= 1; 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const;

  // Runs fn(task, thread) for every task in [0, n_tasks), spread over the
  // workers (thread in [0, n_threads())), and returns when all are done.
  // Tasks are handed out dynamically (atomic counter), so the mapping of
  // tasks to threads varies; results must not depend on it.
  // n_tasks <= 1 (or a pool of one thread) runs inline on the caller.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace omnibus
