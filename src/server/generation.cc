// One generation call's output (generation.h): engine events -> detokenized text, stop strings,
// tool calls and reasoning split -> OpenAI choices, streamed as SSE chunks or answered whole.
#include "server/generation.h"

#include <fmt/format.h>

#include <ctime>
#include <random>

#include "server/openai_response.h"
#include "server/sse.h"
#include "util/check.h"

namespace omnibus::server {
namespace {

std::string new_id(Endpoint endpoint) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}-{:08x}{:08x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                     uint32_t(salt), uint32_t(counter.fetch_add(1) + 1));
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// vLLM's choice.stop_reason: the stop string that ended the choice, else null.
nlohmann::json stop_reason_json(const ChoiceOutput& out) {
  return out.stop_string().empty() ? nlohmann::json(nullptr) : nlohmann::json(out.stop_string());
}

}  // namespace

Generation::Generation(GenerationContext ctx, GenerationSpec spec,
                       std::vector<PreparedPrompt> prompts, std::shared_ptr<ResponseSink> sink)
    : ctx_(std::move(ctx)),
      spec_(std::move(spec)),
      prompts_(std::move(prompts)),
      sink_(std::move(sink)),
      id_(new_id(spec_.endpoint)),
      created_(int64_t(std::time(nullptr))) {
  const size_t n = size_t(spec_.base.n);
  parts_.resize(prompts_.size());
  choices_.resize(prompts_.size() * n);
  std::shared_ptr<const ToolParamTypes> param_types;
  if (spec_.endpoint == Endpoint::kChat && spec_.tools.parse_output())
    param_types = tool_param_types(spec_.tools);
  for (size_t k = 0; k < prompts_.size(); ++k) {
    const size_t base = spec_.echo ? prompts_[k].echo_text.size() : 0;
    for (size_t j = 0; j < n; ++j) {
      choices_[k * n + j].out =
          std::make_unique<ChoiceOutput>(*ctx_.tokenizer, spec_.stop, spec_.logprobs >= 0, base);
      if (spec_.endpoint == Endpoint::kChat && spec_.tools.parse_output()) {
        choices_[k * n + j].tools =
            std::make_unique<ChoiceToolCalls>(ctx_.tool_parser, param_types);
      }
      if (spec_.endpoint == Endpoint::kChat && ctx_.reasoning_parser != ReasoningFormat::kNone) {
        choices_[k * n + j].reasoning =
            std::make_unique<ChoiceReasoning>(ctx_.reasoning_parser, spec_.starts_in_reasoning);
        choices_[k * n + j].out->show_tokens(reasoning_tag_tokens(*ctx_.tokenizer));
      }
    }
  }
}

nlohmann::json Generation::chunk_base() const {
  nlohmann::json j;
  j["id"] = id_;
  j["object"] = spec_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = created_;
  j["model"] = ctx_.model_name;
  return j;
}

void Generation::start(std::vector<std::shared_ptr<RequestStream>> streams) {
  OMNIBUS_CHECK(streams.size() == parts_.size());
  for (size_t k = 0; k < streams.size(); ++k) parts_[k].stream = std::move(streams[k]);
  ctx_.counters->n_active.fetch_add(1);
  if (!spec_.stream) return;
  sink_->begin_stream("text/event-stream");
  if (spec_.endpoint == Endpoint::kChat) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      nlohmann::json c = chunk_base();
      c["choices"] = nlohmann::json::array({{{"index", i},
                                             {"delta", {{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}});
      if (spec_.include_usage) c["usage"] = nullptr;
      sink_->write(sse_event(c));
    }
  }
}

void Generation::cancel() {
  if (cancelled_.exchange(true)) return;
  abort();
}

void Generation::abort() {
  shutdown_.store(true);
  for (const Part& p : parts_) ctx_.engine->abort(p.stream->id());
}

void Generation::on_events(size_t k, std::vector<EngineEvent>& events) {
  for (const EngineEvent& e : events) handle_event(k, e);
}

void Generation::add_echo(size_t k, ChoiceDelta& d) {
  const PreparedPrompt& p = prompts_[k];
  d.text = p.echo_text + d.text;
  if (spec_.logprobs < 0) return;
  std::vector<TokenLogprob> entries =
      prompt_token_logprobs(*ctx_.tokenizer, p.ids, parts_[k].prompt_logprobs, spec_.logprobs);
  entries.insert(entries.end(), std::make_move_iterator(d.logprobs.begin()),
                 std::make_move_iterator(d.logprobs.end()));
  d.logprobs = std::move(entries);
}

nlohmann::json Generation::prompt_logprobs(size_t k) const {
  return prompt_logprobs_json(
      *ctx_.tokenizer,
      prompt_token_logprobs(*ctx_.tokenizer, prompts_[k].ids, parts_[k].prompt_logprobs,
                            spec_.base.prompt_logprobs));
}

void Generation::handle_event(size_t k, const EngineEvent& e) {
  Part& part = parts_[k];
  const size_t n = size_t(spec_.base.n);
  if (!part.started) {
    part.started = true;
    ctx_.counters->n_pending.fetch_sub(1);
    part.n_prompt_tokens = e.n_prompt_tokens;
    part.n_cached_tokens = e.n_cached_tokens;
    ctx_.metrics->add_prompt_tokens(e.n_prompt_tokens);
    if (e.first_scheduled != EngineEvent::Clock::time_point{}) {
      ctx_.metrics->observe_queue_time(seconds(e.first_scheduled - part.stream->submit_time()));
    }
    if (e.token >= 0) {
      part.first_token = e.time;
      ctx_.metrics->observe_ttft(seconds(e.time - part.stream->submit_time()));
    }
  }
  if (!e.prompt_logprobs.empty()) part.prompt_logprobs = e.prompt_logprobs;
  if (e.token >= 0) {
    ctx_.metrics->add_generation_tokens(1);
    part.last_token = e.time;
    part.max_tokens_seen = std::max(part.max_tokens_seen, e.n_output_tokens);
  }

  const size_t ci = k * n + size_t(e.seq_index);
  OMNIBUS_CHECK(ci < choices_.size());
  Choice& choice = choices_[ci];
  const bool was_finished = choice.out->finished();
  if (!was_finished && e.token >= 0) choice.n_reasoning_tokens = e.n_reasoning_tokens;
  ChoiceDelta d;
  if (spec_.echo_only && !was_finished) {
    // Scoring a prompt: the one generated token is dropped.
    EngineEvent end = e;
    end.token = -1;
    if (end.finish == FinishReason::kNone || end.finish == FinishReason::kStop)
      end.finish = FinishReason::kLength;
    d = choice.out->on_event(end);
  } else {
    d = choice.out->on_event(e);
  }
  if (!was_finished && spec_.echo && !choice.echoed) {
    choice.echoed = true;
    add_echo(k, d);
  }
  if (!d.finish_reason.empty())
    ctx_.metrics->count_finished(cancelled_ ? "abort" : d.finish_reason);
  if (!was_finished) emit(ci, d);

  // Every choice of this request ended on a stop string: stop its sequences in the engine.
  if (!e.final && !part.aborted_after_stop) {
    bool all_done = true;
    for (size_t j = 0; j < n; ++j) all_done = all_done && choices_[k * n + j].out->finished();
    if (all_done) {
      part.aborted_after_stop = true;
      ctx_.engine->abort(part.stream->id());
    }
  }
  if (e.final) {
    part.final = true;
    part.pinned = e.pinned;
    if (part.max_tokens_seen > 0) {
      const auto submit = part.stream->submit_time();
      ctx_.metrics->observe_e2e(seconds(part.last_token - submit));
      if (part.max_tokens_seen > 1) {
        ctx_.metrics->observe_tpot(seconds(part.last_token - part.first_token) /
                                   double(part.max_tokens_seen - 1));
      }
    }
    if (++n_final_ == parts_.size()) finish();
  }
}

void Generation::emit(size_t ci, ChoiceDelta& d) {
  const bool chat = spec_.endpoint == Endpoint::kChat;
  Choice& choice = choices_[ci];
  nlohmann::json tool_deltas = nlohmann::json::array();
  std::string reasoning;
  if (choice.reasoning) {  // thinking first: the tool parser reads only the answer
    ReasoningDelta rd = choice.reasoning->push(d.text, !d.finish_reason.empty());
    d.text = std::move(rd.content);
    if (spec_.reasoning.include_reasoning) reasoning = std::move(rd.reasoning);
  }
  if (choice.tools) {
    const bool end = !d.finish_reason.empty();
    ChoiceToolCalls::Delta td = choice.tools->push(d.text, end);
    d.text = std::move(td.content);
    tool_deltas = std::move(td.tool_calls);
    if (end) d.finish_reason = tool_finish_reason(d.finish_reason, choice.tools->n_calls());
  }
  if (!spec_.stream) {
    choice.text += d.text;
    if (spec_.logprobs >= 0) {
      if (chat) {
        append_chat_logprobs(*ctx_.tokenizer, d.logprobs, choice.logprobs);
      } else {
        append_completion_logprobs(*ctx_.tokenizer, d.logprobs, choice.logprobs);
      }
    }
    return;
  }
  if (d.text.empty() && reasoning.empty() && d.logprobs.empty() && d.finish_reason.empty() &&
      tool_deltas.empty()) {
    return;
  }
  if (cancelled_) return;
  nlohmann::json c = chunk_base();
  nlohmann::json ch;
  ch["index"] = ci;
  nlohmann::json lp = nullptr;
  if (spec_.logprobs >= 0 && !d.logprobs.empty()) {
    if (chat) {
      append_chat_logprobs(*ctx_.tokenizer, d.logprobs, lp);
    } else {
      append_completion_logprobs(*ctx_.tokenizer, d.logprobs, lp);
    }
  }
  if (chat) {
    ch["delta"] = d.text.empty() ? nlohmann::json::object() : nlohmann::json{{"content", d.text}};
    if (!reasoning.empty()) {
      ch["delta"]["reasoning_content"] = reasoning;
      ch["delta"]["reasoning"] = std::move(reasoning);
    }
    if (!tool_deltas.empty()) ch["delta"]["tool_calls"] = std::move(tool_deltas);
  } else {
    ch["text"] = d.text;
  }
  ch["logprobs"] = std::move(lp);
  ch["finish_reason"] =
      d.finish_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.finish_reason);
  if (!d.finish_reason.empty()) ch["stop_reason"] = stop_reason_json(*choice.out);
  c["choices"] = nlohmann::json::array({std::move(ch)});
  if (spec_.include_usage) c["usage"] = nullptr;
  sink_->write(sse_event(c));
}

void Generation::finish() {
  int64_t prompt_tokens = 0, cached = 0, completion_tokens = 0, reasoning_tokens = 0;
  for (const Part& p : parts_) {
    prompt_tokens += p.n_prompt_tokens;
    cached += p.n_cached_tokens;
  }
  bool cut = false;  // a choice ended by abort(): the server shut down before it finished
  for (const Choice& c : choices_) {
    completion_tokens += c.out->n_tokens();
    reasoning_tokens += c.n_reasoning_tokens;
    cut = cut || c.out->finish_reason().empty() || c.out->finish_reason() == "abort";
  }
  cut = cut && shutdown_.load() && !cancelled_;
  if (cut)
    ctx_.counters->n_cut.fetch_add(1);  // before the response is out: the drain reads it after
  if (spec_.echo_only) completion_tokens = 0;
  const nlohmann::json usage =
      usage_json(prompt_tokens, completion_tokens, cached,
                 ctx_.reasoning_parser != ReasoningFormat::kNone ? reasoning_tokens : -1);
  if (spec_.stream) {
    // A cut stream has had each unfinished choice's last chunk with
    // finish_reason "abort"; it ends like any other.
    if (!cancelled_) {
      if (spec_.include_usage) {
        nlohmann::json c = chunk_base();
        c["choices"] = nlohmann::json::array();
        c["usage"] = usage;
        sink_->write(sse_event(c));
      }
      sink_->write(sse_done());
      sink_->end_stream();
    }
  } else if (cut) {
    const ApiError e = ApiError::unavailable(fmt::format(
        "the server shut down before this request finished ({} of its tokens had been generated); "
        "retry it",
        completion_tokens));
    sink_->respond(e.status, "application/json", e.to_json());
  } else if (!cancelled_) {
    sink_->respond(200, "application/json", response_body(usage));  // its JSON tree freed first
  }
  if (cancelled_ && ctx_.kv_export != nullptr) {
    for (const Part& p : parts_) {
      if (p.pinned != nullptr) ctx_.kv_export->drop(*p.pinned);  // nobody will pull it
    }
  }
  ctx_.counters->n_active.fetch_sub(1);
}

std::string Generation::response_body(const nlohmann::json& usage) {
  const bool chat = spec_.endpoint == Endpoint::kChat;
  nlohmann::json r;
  r["id"] = id_;
  r["object"] = chat ? "chat.completion" : "text_completion";
  r["created"] = created_;
  r["model"] = ctx_.model_name;
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    nlohmann::json ch;
    ch["index"] = i;
    std::string reason = c.out->finish_reason().empty() ? "abort" : c.out->finish_reason();
    // Aborted: what the parsers held back.
    std::string held = c.reasoning ? c.reasoning->push("", /*end=*/true).content : "";
    if (!(chat && c.tools)) c.text += held;
    if (chat && c.tools) {
      if (!c.tools->ended()) c.text += c.tools->push(held, /*end=*/true).content;
      const int n_calls = c.tools->n_calls();
      ch["message"] = {{"role", "assistant"}, {"content", tool_message_content(c.text, n_calls)}};
      if (n_calls > 0) ch["message"]["tool_calls"] = c.tools->calls();
      reason = tool_finish_reason(reason, n_calls);
    } else if (chat) {
      ch["message"] = {{"role", "assistant"}, {"content", std::move(c.text)}};
    } else {
      ch["text"] = std::move(c.text);
    }
    if (c.reasoning) {
      const nlohmann::json thinking =
          spec_.reasoning.include_reasoning && !c.reasoning->reasoning().empty()
              ? nlohmann::json(c.reasoning->reasoning())
              : nlohmann::json(nullptr);
      ch["message"]["reasoning_content"] = thinking;
      ch["message"]["reasoning"] = thinking;
    }
    // Moved, not copied: the choice's logprobs are freed with this tree.
    ch["logprobs"] = c.logprobs.is_null() ? nlohmann::json(nullptr) : std::move(c.logprobs);
    ch["finish_reason"] = reason;
    ch["stop_reason"] = stop_reason_json(*c.out);
    if (spec_.base.prompt_logprobs >= 0 && !chat) {
      ch["prompt_logprobs"] = prompt_logprobs(i / size_t(spec_.base.n));
    }
    list.push_back(std::move(ch));
  }
  r["choices"] = std::move(list);
  if (spec_.base.prompt_logprobs >= 0 && chat) {
    r["prompt_logprobs"] = prompt_logprobs(0);  // chat has one prompt
  }
  r["usage"] = usage;
  if (ctx_.kv_export != nullptr && parts_[0].pinned != nullptr) {
    r["kv_transfer_params"] = ctx_.kv_export->offer(*parts_[0].pinned, parts_[0].n_prompt_tokens);
  }
  return json_dump(r);
}

}  // namespace omnibus::server
