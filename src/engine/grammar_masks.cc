#include "engine/grammar_masks.h"

#include <utility>

namespace omnibus {

GrammarMasks::GrammarMasks() : worker_([this] { run(); }) {}

GrammarMasks::~GrammarMasks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

std::shared_ptr<GrammarMasks::Pending> GrammarMasks::submit(
    std::shared_ptr<const grammar::TokenMasker> masker, const grammar::GrammarMatcher& matcher) {
  auto out = std::make_shared<Pending>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Job{std::move(masker), matcher, out});
  }
  cv_.notify_one();
  return out;
}

std::shared_ptr<const grammar::TokenBitmask> GrammarMasks::wait(Pending& p) {
  std::unique_lock<std::mutex> lock(p.mu);
  p.cv.wait(lock, [&] { return p.mask != nullptr; });
  return p.mask;
}

void GrammarMasks::run() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    // Jobs still queued at shutdown are finished too: someone may wait on them.
    if (queue_.empty()) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::shared_ptr<const grammar::TokenBitmask> mask = job.masker->allowed(job.matcher);
    std::lock_guard<std::mutex> plock(job.out->mu);
    job.out->mask = std::move(mask);
    job.out->cv.notify_all();  // under the lock: the waiter may free Pending once it sees mask
  }
}

}  // namespace omnibus
