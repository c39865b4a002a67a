// GrammarMasks: computes the token masks of constrained sequences on a thread
// of its own, so the mask for a sequence's next token is ready (or nearly) by
// the time its logits are: the engine submits the mask right after a token is
// accepted (the matcher has moved), the model's forward for the next step
// runs meanwhile, and draw() picks the result up (waiting only for what is
// not done yet). Most masks are TokenMasker cache hits and take microseconds;
// a miss walks the vocabulary trie off the engine thread's critical path.
//
//   after emit(t):   seq.next_mask = masks.submit(masker, matcher)   (engine thread)
//   forward(step k+1) ...                                             (pool)
//   draw():          mask = GrammarMasks::get(*seq.next_mask)         (pool thread)
//
// submit() answers from the masker's cache at once when it can (most
// tokens: a lookup, no thread hand-off), so the worker only wakes for cache
// misses and does not take a core from the forward pass for nothing.
// get() takes over a job the worker has not started (it computes the mask on
// the calling pool thread), so when many masks miss the cache at once the
// pool's threads share them instead of queueing behind the one worker; it
// waits only for a job the worker is already running.
//
// A Pending is shared by the job and the sequence; a sequence that is freed
// before its mask is done just drops its reference (the worker finishes the
// job and the result is discarded). The destructor drains the queue.
//
// Thread-safety: submit() and wait() from any thread (the engine submits from
// its thread and from Engine::submit); the worker thread is internal.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "grammar/token_mask.h"

namespace omnibus {

class GrammarMasks {
 public:
  struct Pending {
    // A job: compute the mask of m's state under k.
    Pending(std::shared_ptr<const grammar::TokenMasker> k, const grammar::GrammarMatcher& m)
        : masker(std::move(k)), matcher(m) {}
    // Already answered (a cache hit): nothing to compute, no matcher copied.
    explicit Pending(std::shared_ptr<const grammar::TokenBitmask> ready)
        : taken(true), mask(std::move(ready)) {}

    // Constant after construction (unset when constructed ready).
    std::shared_ptr<const grammar::TokenMasker> masker;
    std::optional<grammar::GrammarMatcher> matcher;

    std::mutex mu;
    std::condition_variable cv;
    bool taken = false;  // guarded by mu: someone computes it (the worker or get())
    std::shared_ptr<const grammar::TokenBitmask> mask;  // guarded by mu; set once
  };

  GrammarMasks();
  ~GrammarMasks();
  GrammarMasks(const GrammarMasks&) = delete;
  GrammarMasks& operator=(const GrammarMasks&) = delete;

  // The mask of `matcher`'s state under `masker`: ready at once when cached,
  // else queued (the matcher is copied).
  std::shared_ptr<Pending> submit(std::shared_ptr<const grammar::TokenMasker> masker,
                                  const grammar::GrammarMatcher& matcher);

  // The mask: computed here if nobody has started it, else waited for.
  static std::shared_ptr<const grammar::TokenBitmask> get(Pending& p);

 private:
  // Computes p's mask unless someone took it already.
  static void compute_if_free(Pending& p);
  void run();

  std::mutex mu_;  // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: started after the fields above exist
};

}  // namespace omnibus
