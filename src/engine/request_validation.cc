#include "engine/request_validation.h"

#include <fmt/format.h>

#include "engine/sampler.h"
#include "engine/thinking.h"

namespace omnibus {

std::optional<RequestError> validate_request(const Request& req, int32_t n_vocab,
                                             int32_t max_model_len) {
  auto fail = [](std::string field, std::string message, std::string code = "") {
    return RequestError{std::move(field), std::move(message), std::move(code)};
  };
  if (req.prompt.empty()) return fail("prompt", "the prompt is empty after tokenization");
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= n_vocab) {
      return fail("prompt",
                  fmt::format("prompt token id {} is outside the vocabulary [0, {})", t, n_vocab));
    }
  }
  for (int32_t t : req.stop_token_ids) {
    if (t < 0 || t >= n_vocab) {
      return fail("stop_token_ids",
                  fmt::format("stop token id {} is outside the vocabulary [0, {})", t, n_vocab));
    }
  }
  if (req.max_tokens < 1)
    return fail("max_tokens", fmt::format("max_tokens must be >= 1, got {}", req.max_tokens));
  const int64_t total =
      int64_t(req.prompt.size()) + (req.embed ? 0 : req.max_tokens);  // embed: no output
  if (total > max_model_len) {
    return fail(
        "max_tokens",
        fmt::format(
            "this model's maximum context length is {} tokens, but {} tokens were requested ({} in "
            "the prompt, {} for the completion); shorten the prompt or lower max_tokens",
            max_model_len, total, req.prompt.size(), req.max_tokens),
        "context_length_exceeded");
  }
  if (req.min_tokens < 0 || req.min_tokens > req.max_tokens) {
    return fail("min_tokens",
                fmt::format("'min_tokens' must be in [0, max_tokens = {}] (the tokens the context "
                            "leaves for the completion), got {}",
                            req.max_tokens, req.min_tokens));
  }
  if (req.n < 1 || req.n > 128)
    return fail("n", fmt::format("n must be in [1, 128], got {}", req.n));
  if (req.grammar != nullptr && req.grammar->n_vocab() != n_vocab) {
    return fail("response_format",
                fmt::format("the grammar's vocabulary has {} tokens, the model {}",
                            req.grammar->n_vocab(), n_vocab));
  }
  if (req.prompt_logprobs < -1 || req.prompt_logprobs > 20) {
    return fail("prompt_logprobs",
                fmt::format("prompt_logprobs must be in [0, 20], got {}", req.prompt_logprobs));
  }
  if (req.prompt_logits_sink && req.prompt_logprobs < 0) {
    return fail("prompt_logprobs", "a prompt logits sink needs prompt_logprobs >= 0");
  }
  if (Status s = validate(req.sampling, n_vocab); !s.is_ok()) return fail("", s.message());
  if (req.thinking != nullptr) {
    const ThinkingRule& t = *req.thinking;
    bool ids_ok = !t.close.empty() && (t.starts_open || !t.open.empty()) && t.budget >= -1;
    for (const std::vector<int32_t>* v : {&t.open, &t.close}) {
      for (int32_t id : *v) ids_ok = ids_ok && id >= 0 && id < n_vocab;
    }
    if (!ids_ok) {
      return fail("thinking_token_budget",
                  "a thinking rule needs closing-tag tokens (and opening-tag tokens unless the "
                  "prompt opened the "
                  "block) inside the vocabulary, and a budget >= -1");
    }
  }
  if (req.kv_import != nullptr) {
    const KvImport& im = *req.kv_import;
    if (im.n_blocks < 0 || !im.fetch || !im.finished) {
      return fail("kv_transfer_params", "kv_import needs n_blocks >= 0, fetch and finished");
    }
  }
  return std::nullopt;
}

}  // namespace omnibus
