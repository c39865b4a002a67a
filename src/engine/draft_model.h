// DraftModel: draft-model speculation's proposer (--speculative draft
// --draft-model PATH; engine/speculation.h). A small model with the target's
// vocabulary guesses each speculating sequence's next k tokens greedily; the
// target verifies them in its next step as it verifies prompt lookup's.
//
// Each sequence has its own sequence in the draft's KV pool (no prefix
// sharing, no copy-on-write): `fed` is what that KV holds, a prefix of the
// sequence's tokens followed by draft tokens fed after them. A proposal keeps
// the longest prefix of `fed` that still agrees with the sequence (every draft
// token the target accepted stays; the rest is truncated), feeds the
// sequence's tokens after it (the whole prompt the first time, in chunks of
// at most max_step_tokens a forward), takes the argmax of the last row as the
// first guess, then feeds each guess to get the next: k - 1 more forwards,
// batched across all sequences drafting in the step (each forward reads the
// draft's weights once for all of them).
//
// Exactness: a greedy guess is a one-hot proposal, for which the engine's
// "sample the target, then compare" is the standard rejection rule; outputs
// do not depend on the draft model at all, only the number of steps does.
//
// When the draft pool is full, sequences not drafting in this call give back
// their draft KV (they catch up again later); if that is not enough, a
// sequence simply gets no draft this step.
//
// Thread-safety: engine thread only (like the target Model, the draft runs
// on the engine thread, on the shared thread pool).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "model/step_batch.h"

namespace omnibus {

class DraftModel {
 public:
  // REQUIRES: kv built from model.kv_geometry (one layer group, no prefix
  // caching). Guesses are ids below min(the draft's, the target's n_vocab).
  DraftModel(Model& model, std::unique_ptr<KvCache> kv, int32_t max_step_tokens,
             int32_t target_n_vocab);

  // One sequence's request: its tokens (prompt + output so far), at most k
  // guesses wanted, the vector the guesses go to (cleared first). k = 0:
  // only feed the tokens (a prompt chunk the target computed this step, so
  // that the draft's prefill keeps pace with the target's instead of
  // stalling the sequence's first drafting step).
  struct Job {
    const void* key = nullptr;  // the sequence (identity only)
    TokenView tokens;
    int32_t k = 0;
    std::vector<int32_t>* draft = nullptr;
  };
  void propose(std::span<const Job> jobs);

  // The sequence ended: its draft KV is freed (no-op when it has none).
  void release(const void* key);

  Model& model() { return model_; }
  const KvCache& kv() const { return *kv_; }
  int32_t n_vocab() const { return n_vocab_; }
  // Time spent in the draft model's forwards, and the guesses it made.
  double seconds() const { return seconds_; }
  uint64_t n_guesses() const { return n_guesses_; }
  uint64_t n_forwards() const { return n_forwards_; }
  // The timing of propose() calls (the engine makes one a step, empty or
  // not): the last call's seconds, their average per call (an empty call
  // counts 0 s, so it decays when nothing drafts), and per guess (averaged
  // over the calls that guessed, catch-up feeding included; 0 until one did).
  double last_call_seconds() const { return last_call_seconds_; }
  double seconds_per_call() const { return seconds_per_call_; }
  double seconds_per_guess() const { return std::max(seconds_per_guess_, 0.0); }

 private:
  struct State {
    int32_t kv_seq = -1;
    std::vector<int32_t> fed;  // tokens whose K/V the draft holds, in order
    int32_t n_match = 0;       // fed[0, n_match) are known to be the sequence's
  };
  // Live draft: its state, how many tokens it feeds this forward, and the
  // guesses still wanted.
  struct Live {
    const Job* job;
    State* state;
    int32_t pending_from = 0;  // first of the sequence's tokens not fed yet
    int32_t left = 0;          // guesses still to make
  };
  // Gets `n` more KV slots for st (freeing idle sequences' KV when short).
  bool reserve(State& st, int32_t n, std::span<const Job> jobs);
  void free_state(State& st);
  int32_t argmax(const float* row) const;

  Model& model_;
  std::unique_ptr<KvCache> kv_;
  const int32_t max_step_tokens_;
  const int32_t n_vocab_;
  std::unordered_map<const void*, State> states_;
  StepBatch batch_;
  std::vector<Live> live_, next_;
  std::vector<size_t> in_batch_;  // this forward's entries of live_, in batch order
  std::vector<BlockCopy> copies_;
  double seconds_ = 0;
  double last_call_seconds_ = 0;
  double seconds_per_call_ = 0;
  double seconds_per_guess_ = -1;  // -1: no call has guessed yet
  uint64_t n_guesses_ = 0;
  uint64_t n_forwards_ = 0;
};

}  // namespace omnibus
