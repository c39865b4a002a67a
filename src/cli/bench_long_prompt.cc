// A long prompt arriving among decoding streams (contract: bench_long_prompt.h).
#include "cli/bench_long_prompt.h"

#include <fmt/format.h>

#include "cli/bench_common.h"
#include "cli/engine_request.h"
#include "util/check.h"

namespace omnibus {
namespace {

using Seconds = std::chrono::duration<double>;

}  // namespace

Status LongPromptArrival::submit(Engine& e, const std::shared_ptr<StreamSignal>& signal) {
  OMNIBUS_CHECK(!submitted());
  OMNIBUS_ASSIGN_OR_RETURN(stream_, e.submit(fixed_length_request(prompt_, 1)));
  stream_->set_signal(signal);
  return Status::ok();
}

Status LongPromptArrival::drain(bool& progressed) {
  if (stream_ == nullptr || done_) return Status::ok();
  while (std::optional<EngineEvent> ev = stream_->try_pop()) {
    progressed = true;
    if (ev->token >= 0 && first_token_ == Clock::time_point{}) first_token_ = ev->time;
    if (ev->finish == FinishReason::kAbort) return Status::internal("the long prompt was aborted");
    if (ev->final) done_ = true;
  }
  return Status::ok();
}

Status LongPromptArrival::measure_alone(Engine& e, const Tokenizer& tok) {
  OMNIBUS_ASSIGN_OR_RETURN(EngineRequest req,
                           EngineRequest::submit(e, tok, fixed_length_request(alone_, 1)));
  OMNIBUS_ASSIGN_OR_RETURN(EngineRequestResult r, req.wait());
  ttft_alone_s_ = Seconds(r.first_token - r.submitted).count();
  return Status::ok();
}

void LongPromptArrival::report(const std::vector<Span>& itl_spans, Clock::time_point decoding_from,
                               nlohmann::json& j) const {
  OMNIBUS_CHECK(done_);
  const Clock::time_point arrived = stream_->submit_time();
  const double ttft_s = Seconds(first_token_ - arrived).count();
  std::vector<double> during, alone;
  for (const auto& [a, b] : itl_spans) {
    const double seconds = Seconds(b - a).count();  // summarize_ms takes seconds
    if (b <= arrived) {
      if (a >= decoding_from) alone.push_back(seconds);
    } else if (a < first_token_) {
      during.push_back(seconds);
    }
  }
  nlohmann::json l;
  l["tokens"] = prompt_.size();
  l["ttft_ms"] = ttft_s * 1e3;
  l["ttft_alone_ms"] = ttft_alone_s_ * 1e3;
  l["ttft_ratio"] = ttft_alone_s_ > 0 ? ttft_s / ttft_alone_s_ : 0.0;
  l["itl_alone_ms"] = summarize_ms(alone);
  l["itl_during_ms"] = summarize_ms(during);
  l["itl_alone_samples"] = alone.size();
  l["itl_during_samples"] = during.size();
  const double p99_alone = l["itl_alone_ms"]["p99"];
  l["itl_p99_ratio"] = p99_alone > 0 ? double(l["itl_during_ms"]["p99"]) / p99_alone : 0.0;
  j["long_prompt"] = std::move(l);
}

void LongPromptArrival::print(const nlohmann::json& j) {
  if (!j.contains("long_prompt")) return;
  const nlohmann::json& l = j["long_prompt"];
  fmt::print("long prompt         {} tokens: TTFT {:.1f} ms, {:.1f} ms alone ({:.2f}x)\n",
             size_t(l["tokens"]), double(l["ttft_ms"]), double(l["ttft_alone_ms"]),
             double(l["ttft_ratio"]));
  fmt::print(
      "itl under it        p50 {:.2f} ms, p99 {:.2f} ms ({} intervals); alone p50 {:.2f}, p99 "
      "{:.2f} ms ({}): p99 {:.2f}x\n",
      double(l["itl_during_ms"]["p50"]), double(l["itl_during_ms"]["p99"]),
      size_t(l["itl_during_samples"]), double(l["itl_alone_ms"]["p50"]),
      double(l["itl_alone_ms"]["p99"]), size_t(l["itl_alone_samples"]), double(l["itl_p99_ratio"]));
  if (size_t(l["itl_during_samples"]) < 10 || size_t(l["itl_alone_samples"]) < 10) {
    fmt::print(
        "                    (few intervals: give the streams more --output-len around the "
        "arrival)\n");
  }
}

}  // namespace omnibus
