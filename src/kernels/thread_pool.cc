#include "kernels/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "util/check.h"

namespace omnibus {
namespace {

// How long an idle worker spins for the next job before it sleeps, and how
// long the caller spins for stragglers before it starts yielding its core.
constexpr auto kSpinTime = std::chrono::microseconds(50);

constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kJoinedMask = kClosed - 1;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Set while this thread runs tasks of some pool's job: a parallel_for from
// inside a task runs inline instead of deadlocking.
thread_local bool t_in_job = false;

}  // namespace

struct ThreadPool::Impl {
  // Constant after construction.
  int n_threads = 1;
  std::vector<std::thread> workers;  // n_threads - 1 OS threads (ids 1..n-1)

  // The current job. Written by the caller only while no worker is inside a
  // job (see members), published by the release store of `generation`.
  const std::function<void(int64_t, int)>* fn = nullptr;
  int64_t n_tasks = 0;

  alignas(64) std::atomic<int64_t> next_task{0};
  alignas(64) std::atomic<uint64_t> generation{0};
  // Who is inside the current job: generation << 32 | kClosed | n_joined.
  // A worker joins (n_joined + 1) only while the job is open and current; the
  // caller closes it once every task has been claimed and then waits for the
  // joined workers alone, so a worker that is asleep or descheduled never
  // delays a job it did not take part in.
  alignas(64) std::atomic<uint64_t> members{0};
  alignas(64) std::atomic<bool> busy{false};  // a parallel_for is in progress
  std::atomic<bool> stop{false};

  // Sleeping workers. n_sleeping is changed under mu.
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> n_sleeping{0};

  void run_tasks(int thread) {
    const auto& f = *fn;
    const int64_t n = n_tasks;
    t_in_job = true;
    for (int64_t t = next_task.fetch_add(1, std::memory_order_relaxed); t < n;
         t = next_task.fetch_add(1, std::memory_order_relaxed)) {
      f(t, thread);
    }
    t_in_job = false;
  }

  // Returns the generation of the next job, or seen if stopping.
  uint64_t wait_for_job(uint64_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0;; ++i) {
      const uint64_t g = generation.load(std::memory_order_acquire);
      if (g != seen) return g;
      if (stop.load(std::memory_order_acquire)) return seen;
      cpu_relax();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) break;
    }
    std::unique_lock<std::mutex> lock(mu);
    n_sleeping.fetch_add(1, std::memory_order_seq_cst);
    uint64_t g;
    while ((g = generation.load(std::memory_order_seq_cst)) == seen &&
           !stop.load(std::memory_order_seq_cst)) {
      cv.wait(lock);
    }
    n_sleeping.fetch_sub(1, std::memory_order_relaxed);
    return g;
  }

  void worker_main(int thread) {
    uint64_t seen = 0;
    for (;;) {
      const uint64_t g = wait_for_job(seen);
      if (g == seen) return;  // stop
      seen = g;
      if (!try_join(g)) continue;  // the caller already finished this job
      run_tasks(thread);
      members.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  bool try_join(uint64_t g) {
    uint64_t m = members.load(std::memory_order_acquire);
    for (;;) {
      if ((m >> 32) != (g & 0xffffffffu) || (m & kClosed)) return false;
      if (members.compare_exchange_weak(m, m + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        return true;
      }
    }
  }

  void wake_sleepers() {
    if (n_sleeping.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mu);
      cv.notify_all();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  OMNIBUS_CHECK(n_threads >= 0);
  if (n_threads == 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads < 1) n_threads = 1;
  impl_->n_threads = n_threads;
  impl_->workers.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->worker_main(i); });
  }
}

ThreadPool::~ThreadPool() {
  OMNIBUS_CHECK(!impl_->busy.load());
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true, std::memory_order_seq_cst);
  }
  impl_->cv.notify_all();
  for (auto& w : impl_->workers) w.join();
  delete impl_;
}

int ThreadPool::n_threads() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n_tasks,
                              const std::function<void(int64_t task, int thread)>& fn) {
  if (n_tasks <= 0) return;
  Impl& s = *impl_;
  if (n_tasks == 1 || s.n_threads == 1 || t_in_job) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  const bool was_busy = s.busy.exchange(true, std::memory_order_acquire);
  OMNIBUS_CHECK(!was_busy && "ThreadPool::parallel_for called from two threads at once");

  s.fn = &fn;
  s.n_tasks = n_tasks;
  s.next_task.store(0, std::memory_order_relaxed);
  const uint64_t g = s.generation.load(std::memory_order_relaxed) + 1;
  s.members.store((g & 0xffffffffu) << 32, std::memory_order_relaxed);
  s.generation.store(g, std::memory_order_seq_cst);  // publishes the job
  s.wake_sleepers();

  s.run_tasks(0);

  // Every task is claimed: close the job to late workers, then wait for the
  // ones that joined to finish their last task.
  s.members.fetch_or(kClosed, std::memory_order_acq_rel);
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0; (s.members.load(std::memory_order_acquire) & kJoinedMask) != 0; ++i) {
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
  s.fn = nullptr;
  s.busy.store(false, std::memory_order_release);
}

}  // namespace omnibus
