// EngineRequest: one Request run on the Engine from a subcommand's thread,
// its events turned into completions by the server's own pieces
// (server::ChoiceOutput: the UTF-8-safe incremental detokenizer and the
// stop-string rules of /v1/completions), so `omnibus generate` prints what the
// API returns for the same request and seed.
//
//   submit() --> Engine --events--> wait(): per completion, ChoiceOutput
//                                    -> on_text(completion, text) as released
//
// A stop string ends a completion the engine knows nothing of: once every
// completion has ended, wait() aborts the engine request (as the server's
// Generation does) and returns after its final event. Several EngineRequests
// may be in flight on one engine; each is waited on by one thread.
//
// Thread-safety: one EngineRequest, one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/choice_output.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace omnibus {

// One completion (one of the request's n sequences), as the API reports it.
struct Completion {
  std::string text;           // without the stop string or the EOG / stop token
  std::string finish_reason;  // the API's: "stop", "length", "grammar_dead_end" or "abort"
  std::string stopped_by;     // for people: "end of generation token", "stop token",
                              // "stop string", "length" or "abort"
  int32_t n_tokens = 0;       // tokens generated up to its end (usage.completion_tokens)
  std::vector<server::TokenLogprob> logprobs;  // when sampling.n_logprobs >= 0
  std::chrono::steady_clock::time_point end;   // the step that ended it finished
};

struct EngineRequestResult {
  using Clock = std::chrono::steady_clock;

  std::vector<Completion> completions;         // [request.n]
  std::vector<PromptLogprob> prompt_logprobs;  // when request.prompt_logprobs >= 0
  int32_t n_prompt_tokens = 0;
  int32_t n_cached_tokens = 0;  // prompt tokens the prefix cache served
  Clock::time_point submitted;
  Clock::time_point first_scheduled;  // the request's first engine step began
  Clock::time_point first_token;      // the step that sampled its first token finished
};

// How events become text.
struct TextOptions {
  std::vector<std::string> stops;  // stop strings, none empty
  bool render_special = false;     // print special tokens' text
};

class EngineRequest {
 public:
  // Called with text of completion `index` as soon as it is final.
  using OnText = std::function<void(int32_t index, std::string_view text)>;

  // Queues `request`. REQUIRES: engine and tok outlive this.
  static StatusOr<EngineRequest> submit(Engine& engine, const Tokenizer& tok, Request request,
                                        TextOptions options = {});

  // A request never waited for is aborted.
  ~EngineRequest();
  EngineRequest(EngineRequest&&) = default;
  EngineRequest& operator=(EngineRequest&&) = default;

  // Consumes the events until the request's final one. kInternal when the
  // engine aborted a completion (it was shutting down). REQUIRES: called once.
  StatusOr<EngineRequestResult> wait(const OnText& on_text = {});

 private:
  EngineRequest(Engine& engine, std::shared_ptr<RequestStream> stream,
                std::vector<int32_t> stop_token_ids);

  Engine* engine_;
  std::vector<int32_t> stop_token_ids_;
  std::shared_ptr<RequestStream> stream_;
  std::vector<std::unique_ptr<server::ChoiceOutput>> outputs_;  // [n]
  EngineRequestResult result_;
};

}  // namespace omnibus
