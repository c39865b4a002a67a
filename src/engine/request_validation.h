// The checks a Request must pass before an engine takes it, in one place:
// the server calls validate_request (and answers a failure with a 400 that
// names the field), Engine::submit calls it too and trusts nothing else.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/request.h"

namespace omnibus {

struct RequestError {
  std::string field;    // the request parameter at fault ("prompt", "max_tokens", ...)
  std::string message;  // for the client
  std::string code;     // an OpenAI error code, "" for the generic one
};

// Token ids inside [0, n_vocab), max_tokens >= 1, min_tokens within it, n in
// [1, 128], a grammar of this vocabulary, prompt_logprobs in [-1, 20] (and a
// logits sink only with them), valid sampling parameters, a well-formed
// kv_import, and prompt + max_tokens within max_model_len.
std::optional<RequestError> validate_request(const Request& req, int32_t n_vocab,
                                             int32_t max_model_len);

}  // namespace omnibus
