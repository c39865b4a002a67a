// StepTimeModel: what a step's tokens cost, measured, for two decisions:
// the step token budget that keeps running streams' pace under a target while
// prompts prefill (Sarathi-Serve's stall-free batching with a latency target;
// --max-itl-ms), and whether a draft token is worth verifying (speculative
// decoding backs off as steps become compute-bound; speculation.h).
//
// Each step reports its decodes (one token each), its extra tokens (prompt
// chunks and draft tokens) and its wall time. The model keeps two estimates, both
// exponentially weighted so they follow the machine and the context:
//   t_d  the time of a step of decodes alone (weights read once, one row
//        per stream), from the steps without prompt tokens;
//   mu   the time one more token adds, from the steps with extra tokens:
//        (t - t_d) / extra tokens. It grows as a long prompt's chunks sit
//        deeper in its context (attention), and the estimate follows.
// A step in which sequences decode then carries at most (target - t_d) / mu
// prompt tokens, never fewer than kMinPromptTokens (prompts always progress)
// and, before the first mixed step is seen, a probe of kProbeTokens.
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstdint>

namespace omnibus {

class StepTimeModel {
 public:
  static constexpr int32_t kMinPromptTokens = 1;
  static constexpr int32_t kProbeTokens = 8;

  // Weight of the newest step in each estimate, (0, 1].
  explicit StepTimeModel(double alpha = 0.5) : alpha_(alpha) {}

  // A step of n_decode decodes and n_extra other tokens (prompt chunks,
  // drafts) took `seconds` (wall: forward and sampling).
  void observe(int32_t n_decode, int32_t n_extra, double seconds);

  // What one extra token costs relative to a decode's share of its step,
  // n_decodes * (mu + extra_s) / t_d (0 while unmeasured or when nothing
  // decodes): the acceptance a draft token needs to pay for itself. extra_s:
  // a cost per draft token outside the step's measured time (a draft model's
  // forwards), counted once t_d is known even before mu is.
  double cost_ratio(int32_t n_decodes, double extra_s = 0) const;
  // Whether a step of decodes alone has been timed yet.
  bool has_decode_time() const { return t_decode_ >= 0; }
  // True when t_d has not been re-measured for kRemeasureSteps steps (every
  // step carried extra tokens): the caller should let one step run decodes
  // alone, so the estimate follows the streams' growing context.
  bool wants_decode_only_step() const { return since_decode_only_ >= kRemeasureSteps; }
  // True when mu has not been re-measured for kRemeasureSteps steps of
  // decodes alone (drafts backed off to nothing): the caller should let one
  // step carry extra tokens, so that a cost measured in a noisy moment does
  // not keep drafts off for good.
  bool wants_extra_token_step() const { return since_extra_ >= kRemeasureSteps; }
  static constexpr int32_t kRemeasureSteps = 64;

  // The token budget of the next step, in which n_decodes sequences decode,
  // so that it takes about target_s: in [n_decodes + kMinPromptTokens,
  // max_tokens] (max_tokens when nothing decodes: prompts alone are not
  // paced).
  int32_t token_budget(double target_s, int32_t n_decodes, int32_t max_tokens) const;

  // The estimates so far (false until both exist).
  bool estimates(double* t_decode, double* per_extra_token) const;

 private:
  double alpha_;
  double t_decode_ = -1;           // s, < 0 until a decode-only step is seen
  double mu_ = -1;                 // s per extra token, < 0 until a mixed step is seen
  int32_t since_decode_only_ = 0;  // steps with decodes and extra tokens since t_d was measured
  int32_t since_extra_ = 0;        // steps of decodes alone since mu was measured
};

}  // namespace omnibus
