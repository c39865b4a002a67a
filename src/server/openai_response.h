// JSON pieces of OpenAI responses that do not depend on the transport:
// usage, and the two logprobs formats.
//
//   completions: {"tokens": [str], "token_logprobs": [num|null],
//                 "top_logprobs": [{str: num}|null], "text_offset": [int]}
//   chat:        {"content": [{"token", "logprob", "bytes": [int],
//                              "top_logprobs": [{"token", "logprob", "bytes"}]}]}
//   prompt_logprobs (vLLM's): [null, {"<id>": {"logprob", "rank", "decoded_token"}}, ...]
//                one per prompt token: the token itself with its rank, and the
//                top k alternatives with ranks 1..k (one entry when it is among them)
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "server/choice_output.h"
#include "tokenizer/tokenizer.h"

namespace omnibus::server {

// reasoning_tokens >= 0: also completion_tokens_details.reasoning_tokens.
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
                          int64_t reasoning_tokens = -1);

// Appends entries to a completions logprobs object (created on first use).
void append_completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& entries,
                                nlohmann::json& out);
// Appends entries to a chat logprobs object's "content" (created on first use).
void append_chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& entries,
                          nlohmann::json& out);

// A prompt_logprobs list from prompt_token_logprobs() entries.
nlohmann::json prompt_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& entries);

// Logprobs are finite in JSON: -inf becomes -9999.0 (as OpenAI reports it).
double json_logprob(float lp);

}  // namespace omnibus::server
