#include "cli/engine_request.h"

#include <algorithm>
#include <optional>

#include "util/check.h"

namespace omnibus {

StatusOr<EngineRequest> EngineRequest::submit(Engine& engine, const Tokenizer& tok, Request request,
                                              TextOptions options) {
  const bool want_logprobs = request.sampling.n_logprobs >= 0;
  std::vector<int32_t> stop_token_ids = request.stop_token_ids;
  OMNIBUS_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream,
                           engine.submit(std::move(request)));
  EngineRequest r(engine, std::move(stream), std::move(stop_token_ids));
  for (int32_t i = 0; i < r.stream_->n(); ++i) {
    r.outputs_.push_back(std::make_unique<server::ChoiceOutput>(tok, options.stops, want_logprobs,
                                                                /*text_base=*/0,
                                                                options.render_special));
  }
  r.result_.completions.resize(r.outputs_.size());
  return r;
}

EngineRequest::EngineRequest(Engine& engine, std::shared_ptr<RequestStream> stream,
                             std::vector<int32_t> stop_token_ids)
    : engine_(&engine), stop_token_ids_(std::move(stop_token_ids)), stream_(std::move(stream)) {
  result_.submitted = stream_->submit_time();
}

EngineRequest::~EngineRequest() {
  if (stream_ != nullptr) engine_->abort(stream_->id());
}

StatusOr<EngineRequestResult> EngineRequest::wait(const OnText& on_text) {
  OMNIBUS_CHECK(stream_ != nullptr);  // REQUIRES: wait() once
  bool started = false, aborted_after_stop = false, aborted_by_engine = false;
  for (;;) {
    std::optional<EngineEvent> ev = stream_->pop(std::chrono::seconds(60));
    if (!ev) continue;  // still running (pop waits on the stream's condition)
    EngineEvent& e = *ev;
    if (!started) {
      started = true;
      result_.n_prompt_tokens = e.n_prompt_tokens;
      result_.n_cached_tokens = e.n_cached_tokens;
      result_.first_scheduled = e.first_scheduled;
    }
    if (!e.prompt_logprobs.empty()) result_.prompt_logprobs = std::move(e.prompt_logprobs);
    if (e.token >= 0 && result_.first_token == EngineRequestResult::Clock::time_point{}) {
      result_.first_token = e.time;
    }
    OMNIBUS_CHECK(e.seq_index >= 0 && size_t(e.seq_index) < outputs_.size());
    server::ChoiceOutput& out = *outputs_[size_t(e.seq_index)];
    Completion& c = result_.completions[size_t(e.seq_index)];
    if (!out.finished()) {
      server::ChoiceDelta d = out.on_event(e);
      c.text += d.text;
      if (on_text && !d.text.empty()) on_text(e.seq_index, d.text);
      for (server::TokenLogprob& t : d.logprobs) c.logprobs.push_back(std::move(t));
      if (out.finished()) {
        c.finish_reason = out.finish_reason();
        c.n_tokens = out.n_tokens();
        c.end = e.time;
        switch (e.finish) {
          case FinishReason::kStop: {
            const bool stop_token = std::find(stop_token_ids_.begin(), stop_token_ids_.end(),
                                              e.token) != stop_token_ids_.end();
            c.stopped_by = stop_token ? "stop token" : "end of generation token";
            break;
          }
          case FinishReason::kAbort:
            c.stopped_by = "abort";
            aborted_by_engine = true;
            break;
          default:
            c.stopped_by = c.finish_reason == "stop" ? "stop string" : c.finish_reason;
        }
      }
    }
    if (e.final) break;
    // Every completion ended (stop strings are ours): end the engine request.
    if (!aborted_after_stop && std::all_of(outputs_.begin(), outputs_.end(),
                                           [](const auto& o) { return o->finished(); })) {
      aborted_after_stop = true;
      engine_->abort(stream_->id());
    }
  }
  stream_.reset();
  if (aborted_by_engine) return Status::internal("the engine aborted the request");
  return std::move(result_);
}

}  // namespace omnibus
