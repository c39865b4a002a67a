// Generation: one /v1/completions or /v1/chat/completions call in flight —
// the engine requests it submitted (one per prompt, each with n sequences),
// the choices they feed (choice index = prompt index * n + sequence index),
// and the response it writes to its ResponseSink: SSE chunks as events
// arrive, or one JSON body at the end (with prompt_logprobs when the engine
// scored the prompt: completions per choice, chat on the response).
//
// Lifecycle: the API handler builds it and calls start(); the StreamPump then
// calls on_events() for each engine request until every one has delivered
// its final event, and the response is finished. cancel() (client gone)
// aborts every engine request and writes nothing more; abort() (server
// shutting down) aborts them too, and the client is told: a stream's
// unfinished choices end with finish_reason "abort", then (usage and)
// [DONE]; a non-streamed call gets 503 service_unavailable instead of a
// partial body. Such a call counts in GenerationCounters::n_cut before its
// response is handed to the sink. Either way the blocks return to the pool
// within one engine step and the final abort events still drain through
// on_events().
// When every choice of an engine request has ended on a stop string, that
// request is aborted as well (the engine can only abort whole requests).
//
// Thread-safety: start() on the handler's thread before the pump or any
// other thread sees it; on_events() on the pump thread only; cancel() and
// abort() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/choice_output.h"
#include "server/http_types.h"
#include "server/kv_transfer_service.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/reasoning_output.h"
#include "server/tool_output.h"
#include "server/tool_parsers.h"

namespace omnibus::server {

// Server-wide counters a Generation updates.
struct GenerationCounters {
  std::atomic<int64_t> n_pending{0};  // engine requests submitted, no event yet
  std::atomic<int64_t> n_active{0};   // Generations not finished
  std::atomic<int64_t> n_cut{0};      // Generations that abort() ended before they finished
};

struct GenerationContext {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  ServerMetrics* metrics = nullptr;
  GenerationCounters* counters = nullptr;
  std::string model_name;
  // Set for a prefill whose KV a remote decode worker will pull: the response
  // carries the offer's kv_transfer_params (KvTransferService::offer).
  KvTransferService* kv_export = nullptr;
  // How tool calls are read from chat output when the request has tools
  // (tool_choice != none): message.tool_calls / delta.tool_calls, and
  // finish_reason "tool_calls".
  ToolParserKind tool_parser = ToolParserKind::kHermes;
  // How chat output is split into reasoning and content (reasoning_parser.h):
  // message.reasoning_content (and .reasoning), delta.reasoning_content, and
  // usage.completion_tokens_details.reasoning_tokens. Tool calls are read
  // from the content only.
  ReasoningFormat reasoning_parser = ReasoningFormat::kNone;
};

// One prompt of the call, tokenized.
struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::string echo_text;  // the prompt's text, when echoing
};

class Generation {
 public:
  Generation(GenerationContext ctx, GenerationSpec spec, std::vector<PreparedPrompt> prompts,
             std::shared_ptr<ResponseSink> sink);

  // Takes the submitted streams (one per prompt, in order), counts the call as
  // active and, when streaming, sends the headers (and chat role chunks).
  void start(std::vector<std::shared_ptr<RequestStream>> streams);
  void on_events(size_t k, std::vector<EngineEvent>& events);
  void cancel();
  void abort();

 private:
  struct Part {  // one engine request
    std::shared_ptr<RequestStream> stream;
    bool started = false;
    bool final = false;
    bool aborted_after_stop = false;
    int32_t n_prompt_tokens = 0;
    int32_t n_cached_tokens = 0;
    std::shared_ptr<const KvPinned> pinned;  // the final event's (kv_export)
    std::vector<PromptLogprob> prompt_logprobs;
    std::chrono::steady_clock::time_point first_token, last_token;
    int32_t max_tokens_seen = 0;
  };
  struct Choice {
    std::unique_ptr<ChoiceOutput> out;
    bool echoed = false;
    std::string text;                        // non-streaming: the whole text
    nlohmann::json logprobs;                 // non-streaming: accumulated logprobs
    std::unique_ptr<ChoiceToolCalls> tools;  // chat with tools: reads calls out of the text
    std::unique_ptr<ChoiceReasoning>
        reasoning;                   // chat with a reasoning parser: splits the text first
    int32_t n_reasoning_tokens = 0;  // the engine's count, up to the choice's end
  };

  void handle_event(size_t k, const EngineEvent& e);
  // The echo prefix (text and prompt logprob entries) of a completions choice.
  void add_echo(size_t k, ChoiceDelta& d);
  // The prompt_logprobs list of prompt k, with the alternatives the engine
  // computed (vLLM: echo + logprobs k scores the prompt with k too).
  nlohmann::json prompt_logprobs(size_t k) const;
  void emit(size_t choice_index, ChoiceDelta& d);
  void finish();
  // The non-streamed response; moves the choices' text and logprobs into it.
  std::string response_body(const nlohmann::json& usage);
  nlohmann::json chunk_base() const;

  const GenerationContext ctx_;
  const GenerationSpec spec_;
  const std::vector<PreparedPrompt> prompts_;
  const std::shared_ptr<ResponseSink> sink_;
  const std::string id_;
  const int64_t created_;

  std::vector<Part> parts_;      // [prompts]
  std::vector<Choice> choices_;  // [prompts * n]
  size_t n_final_ = 0;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> shutdown_{false};  // abort() was called
};

}  // namespace omnibus::server
