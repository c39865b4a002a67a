// ChoiceOutput: one choice (one engine sequence) turned from token events into
// the text and logprobs a response carries.
//
// Per sampled token: StreamDecoder (UTF-8-safe pieces) -> StopMatcher (stop
// strings never cut in half) -> the released text. A token that ends the
// sequence by kStop (EOG or a stop_token_id) is not printed and has no
// logprobs entry. A stop string ends the choice with finish_reason "stop";
// the engine request is aborted by the caller once every choice of it is done.
//
// Thread-safety: one choice, one thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace omnibus::server {

// One token's logprob entry, as both response formats need it.
struct TokenLogprob {
  int32_t token = -1;
  bool has_logprob = true;  // false for the first echoed prompt token
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first
  size_t text_offset = 0;  // where its text starts in the choice's text (completions)
  int32_t rank = 0;        // prompt tokens: 1-based rank among the vocabulary (0: not known)
};

// The prompt's tokens as logprob entries, from the engine's prompt logprobs
// (PromptLogprob i scores ids[i + 1]): the first token has none, each
// alternatives list is cut to the best k, text offsets count from 0. Both
// echo + logprobs and prompt_logprobs are views of these entries.
std::vector<TokenLogprob> prompt_token_logprobs(const Tokenizer& tok,
                                                const std::vector<int32_t>& ids,
                                                const std::vector<PromptLogprob>& scored,
                                                int32_t k);

// What one event adds to a choice.
struct ChoiceDelta {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;  // set by the event that ends the choice, else ""
};

class ChoiceOutput {
 public:
  // REQUIRES: tok outlives this. text_base: bytes already in the choice's text
  // before the completion (the echoed prompt), for text_offset. render_special:
  // special tokens' text is printed (the CLI's --show-special).
  ChoiceOutput(const Tokenizer& tok, std::vector<std::string> stops, bool want_logprobs,
               size_t text_base, bool render_special = false);

  // Special tokens whose text is printed all the same (a reasoning model's
  // "<think>" / "</think>" when its vocabulary marks them as control tokens).
  void show_tokens(std::vector<int32_t> ids) { shown_ = std::move(ids); }

  // One of this sequence's events. Ignored (empty delta) once finished().
  ChoiceDelta on_event(const EngineEvent& e);

  bool finished() const { return !finish_reason_.empty(); }
  const std::string& finish_reason() const { return finish_reason_; }
  // The stop string that ended the choice, "" when none did (vLLM's stop_reason).
  const std::string& stop_string() const { return stop_.matched(); }
  // Completion tokens for usage: tokens sampled up to the end of the choice.
  int32_t n_tokens() const { return n_tokens_; }

 private:
  const Tokenizer& tok_;
  StreamDecoder decoder_;
  StopMatcher stop_;
  const bool want_logprobs_;
  size_t piece_bytes_;  // text_base + raw bytes of the pieces so far
  int32_t n_tokens_ = 0;
  std::string finish_reason_;
  std::vector<int32_t> shown_;
};

// A token's text for logprob listings: its bytes when they are valid UTF-8,
// else "bytes:\xNN..." (vLLM's convention for partial characters).
std::string token_display(const Tokenizer& tok, int32_t id);

// True when `s` is valid UTF-8.
bool is_valid_utf8(const std::string& s);

}  // namespace omnibus::server
