// StepTimeModel: the step token budget that keeps running streams' pace
// under a target while prompts prefill (Sarathi-Serve's stall-free batching
// with a latency target; --max-itl-ms).
//
// Each step reports its decode tokens (decodes and their drafts), its prompt
// tokens and its wall time. The model keeps two estimates, both
// exponentially weighted so they follow the machine and the context:
//   t_d  the time of a step of decodes alone (weights read once, one row
//        per stream), from the steps without prompt tokens;
//   mu   the time one more prompt token adds, from the steps with some:
//        (t - t_d) / prompt tokens. It grows as a long prompt's chunks sit
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

  // A step of n_decode decode tokens and n_prompt prompt tokens took
  // `seconds` (wall: forward and sampling).
  void observe(int32_t n_decode, int32_t n_prompt, double seconds);

  // The token budget of the next step, in which n_decodes sequences decode,
  // so that it takes about target_s: in [n_decodes + kMinPromptTokens,
  // max_tokens] (max_tokens when nothing decodes: prompts alone are not
  // paced).
  int32_t token_budget(double target_s, int32_t n_decodes, int32_t max_tokens) const;

  // The estimates so far (false until both exist).
  bool estimates(double* t_decode, double* per_prompt_token) const;

 private:
  double alpha_;
  double t_decode_ = -1;  // s, < 0 until a decode-only step is seen
  double mu_ = -1;        // s per prompt token, < 0 until a mixed step is seen
};

}  // namespace omnibus
