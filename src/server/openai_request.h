// Parsing and validating the bodies of POST /v1/completions and
// POST /v1/chat/completions into a GenerationSpec: prompts (text or token ids)
// or chat messages, the engine Request fields shared by every prompt
// (sampling, max_tokens, stop token ids, n, ...), and what the response must
// carry (stream, usage chunk, echo, logprobs, stop strings).
//
// Validation is strict on types and ranges (see json_fields.h) and names the
// offending field; unknown fields are ignored, as OpenAI's API does. What
// needs the tokenizer (token counts, the context limit) is checked later, when
// the prompts are tokenized (see generation.h).
//
// Field mapping (OpenAI -> omnibus Request):
//   max_tokens | max_completion_tokens -> max_tokens (chat default: what the context leaves)
//   temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
//   repetition_penalty, logit_bias, seed -> sampling (penalties over the whole history)
//   stop -> stop strings (server side); stop_token_ids, ignore_eos, min_tokens, n -> Request
//   tools, tool_choice, parallel_tool_calls -> tools (tool_request.h)
//   chat_template_kwargs, reasoning_effort, thinking_token_budget,
//   include_reasoning, messages[i].reasoning_content -> reasoning (reasoning_request.h)
//   logprobs (completions: int k) | logprobs + top_logprobs (chat) -> sampling.n_logprobs
//   prompt_logprobs (vLLM's: int k, not with stream) and echo + logprobs
//   (completions) -> prompt_logprobs: the larger k of the two; both views of
//   the prompt's logprobs come from the engine's one computation
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/request.h"
#include "grammar/structured_output.h"
#include "server/api_error.h"
#include "server/chat_renderer.h"
#include "server/reasoning_request.h"
#include "server/tool_request.h"

namespace omnibus::server {

enum class Endpoint { kCompletions, kChat };

struct PromptInput {
  bool is_text = true;
  std::string text;          // when is_text
  std::vector<int32_t> ids;  // when !is_text
};

class JsonFields;
// A prompt field's value `p` ("prompt" of completions, "input" of embeddings):
// a string, a list of token ids, or a non-empty list of strings and lists of
// token ids. Appends at most `max_items` items to `out`; more (a 400 saying
// "at most N <plural> per request"), another shape, ids outside [0, n_vocab)
// or an empty string fail `f` naming `field`. (prompt_list.cc)
void parse_prompt_list(JsonFields& f, const char* field, const nlohmann::json& p, int32_t n_vocab,
                       int32_t max_items, const char* plural, std::vector<PromptInput>& out);

struct GenerationSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                  // "" when not given
  std::vector<PromptInput> prompts;   // completions: one or more; chat: empty
  std::vector<ChatMessage> messages;  // chat: non-empty
  bool add_generation_prompt = true;  // chat

  Request base;                   // prompt left empty; max_tokens valid when max_tokens_set
  bool max_tokens_set = false;    // chat without a limit: the rest of the context
  std::vector<std::string> stop;  // stop strings, non-empty each
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool echo = false;               // completions: prompt text before the completion
  bool echo_only = false;          // completions: echo with max_tokens 0 (scoring a prompt)
  int32_t logprobs = -1;           // -1: none; k: the sampled token's logprob plus top k
  int32_t prompt_logprobs = -1;    // the prompt_logprobs field (-1: absent); what the engine
                                   // computes, and the response lists, is base.prompt_logprobs
  bool add_special_tokens = true;  // completions: BOS/EOS as the model asks; chat: false

  // Structured output (structured_request.h): what the output must follow,
  // the field that asked (for errors, e.g. "response_format.json_schema.schema")
  // and, for a schema object, its JSON pointer in the body ("" otherwise).
  grammar::StructuredOutput structured;
  std::string structured_field;
  std::string schema_pointer;
  ToolsSpec tools;  // chat: tools, tool_choice, parallel_tool_calls (tool_request.h)
  // chat, tool_choice "required" or named: the EBNF that forces the tool-call
  // format (tool_grammar.h); set by the API server, which knows the parser. "" otherwise.
  std::string tool_grammar;
  // chat: chat_template_kwargs, reasoning_effort, thinking_token_budget,
  // include_reasoning (reasoning_request.h).
  ReasoningRequest reasoning;
  // chat: the output starts inside a thinking block (set by the API server
  // from the rendered prompt; reasoning_parser.h starts_in_reasoning).
  bool starts_in_reasoning = false;
};

// Bounds a request must keep. The ones set by `omnibus serve` flags are named
// in the 400 a request over them gets.
struct ParseLimits {
  int32_t n_vocab = 0;
  int32_t max_n = 16;  // most choices per prompt, and best_of (--max-n; the engine's bound is 128)
  int32_t max_logprobs =
      20;  // logprobs, top_logprobs, prompt_logprobs (--max-logprobs; the engine's bound is 20)
  int32_t max_stop = 16;      // most stop strings
  int32_t max_prompts = 256;  // most prompts in one completions request
};

ApiResult<GenerationSpec> parse_completion_request(const nlohmann::json& body,
                                                   const ParseLimits& limits);
ApiResult<GenerationSpec> parse_chat_request(const nlohmann::json& body, const ParseLimits& limits);

}  // namespace omnibus::server
