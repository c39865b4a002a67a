#include "server/response_bounds.h"

#include <fmt/format.h>

namespace omnibus::server {

int64_t response_logprob_entries(const GenerationSpec& spec,
                                 const std::vector<int64_t>& prompt_tokens) {
  const int64_t n = spec.base.n;
  const int64_t generated = spec.echo_only ? 0 : spec.base.max_tokens;
  const int32_t prompt_k =
      spec.base.prompt_logprobs;  // what the response lists (echo + logprobs included)
  int64_t total = 0;
  if (spec.endpoint == Endpoint::kChat) {
    if (spec.logprobs >= 0) total += n * generated * (spec.logprobs + 1);
    if (prompt_k >= 0 && !prompt_tokens.empty()) total += prompt_tokens[0] * (prompt_k + 1);
    return total;
  }
  for (const int64_t len : prompt_tokens) {
    int64_t per_choice = 0;
    if (spec.logprobs >= 0) per_choice += (generated + (spec.echo ? len : 0)) * (spec.logprobs + 1);
    if (prompt_k >= 0) per_choice += len * (prompt_k + 1);
    total += n * per_choice;
  }
  return total;
}

std::optional<ApiError> check_response_bounds(const GenerationSpec& spec,
                                              const std::vector<int64_t>& prompt_tokens,
                                              int64_t max_entries) {
  if (max_entries <= 0) return std::nullopt;
  const int64_t entries = response_logprob_entries(spec, prompt_tokens);
  if (entries <= max_entries) return std::nullopt;
  const char* param = spec.logprobs < 0                  ? "prompt_logprobs"
                      : spec.endpoint == Endpoint::kChat ? "top_logprobs"
                                                         : "logprobs";
  return ApiError::invalid(
      param,
      fmt::format(
          "this request could return {} logprob entries (n x (echoed prompt tokens + max_tokens) x "
          "(logprobs + 1), with prompt_logprobs), over this server's limit of {} "
          "(--max-logprob-entries); "
          "lower n, logprobs, max_tokens or the prompt's length",
          entries, max_entries),
      "response_too_large");
}

}  // namespace omnibus::server
