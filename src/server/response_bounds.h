// How much a generation response may hold, checked before anything is
// submitted: echo + logprobs + n multiply, and a 50 KB request could
// otherwise ask for a response of hundreds of megabytes, built in memory.
//
// A response's logprob entries count one per listed token and one per
// alternative shown with it:
//   completions, per prompt p (L_p tokens) and each of its n choices:
//     logprobs k:         (max_tokens [0 when echo scores only] + L_p if echo) * (k + 1)
//     prompt_logprobs k': L_p * (k' + 1)   (listed per choice; echo + logprobs implies it)
//   chat: n * max_tokens * (top_logprobs + 1) + L * (prompt_logprobs + 1) once.
// Streamed or not, the same count (a stream's echo chunk holds a prompt's).
// It is an upper bound: max_tokens counts as generated.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace omnibus::server {

// The logprob entries `spec` may return, for prompts of these token counts.
// REQUIRES: spec.base.max_tokens resolved (>= 1).
int64_t response_logprob_entries(const GenerationSpec& spec,
                                 const std::vector<int64_t>& prompt_tokens);

// A 400 naming the count, the limit and --max-logprob-entries when the
// response could hold more than `max_entries` (0: no bound); nullopt otherwise.
std::optional<ApiError> check_response_bounds(const GenerationSpec& spec,
                                              const std::vector<int64_t>& prompt_tokens,
                                              int64_t max_entries);

}  // namespace omnibus::server
