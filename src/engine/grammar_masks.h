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
//   draw():          mask = GrammarMasks::wait(*seq.next_mask)        (pool thread)
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
#include <thread>

#include "grammar/token_mask.h"

namespace omnibus {

class GrammarMasks {
 public:
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    std::shared_ptr<const grammar::TokenBitmask> mask;  // guarded by mu; set once
  };

  GrammarMasks();
  ~GrammarMasks();
  GrammarMasks(const GrammarMasks&) = delete;
  GrammarMasks& operator=(const GrammarMasks&) = delete;

  // Queues the mask of `matcher`'s state (copied) under `masker`.
  std::shared_ptr<Pending> submit(std::shared_ptr<const grammar::TokenMasker> masker,
                                  const grammar::GrammarMatcher& matcher);

  // The mask, once computed (blocks until then).
  static std::shared_ptr<const grammar::TokenBitmask> wait(Pending& p);

 private:
  struct Job {
    std::shared_ptr<const grammar::TokenMasker> masker;
    grammar::GrammarMatcher matcher;
    std::shared_ptr<Pending> out;
  };
  void run();

  std::mutex mu_;  // guards queue_ and stop_
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: started after the fields above exist
};

}  // namespace omnibus
