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
  if (std::shared_ptr<const grammar::TokenBitmask> hit = masker->cached(matcher)) {
    return std::make_shared<Pending>(std::move(hit));
  }
  auto p = std::make_shared<Pending>(std::move(masker), matcher);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(p);
  }
  cv_.notify_one();
  return p;
}

void GrammarMasks::compute_if_free(Pending& p) {
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.taken) return;
    p.taken = true;
  }
  std::shared_ptr<const grammar::TokenBitmask> mask = p.masker->allowed(*p.matcher);
  std::lock_guard<std::mutex> lock(p.mu);
  p.mask = std::move(mask);
  p.cv.notify_all();  // under the lock, so a waiter cannot miss it
}

std::shared_ptr<const grammar::TokenBitmask> GrammarMasks::get(Pending& p) {
  compute_if_free(p);
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
    std::shared_ptr<Pending> p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    compute_if_free(*p);
  }
}

}  // namespace omnibus
