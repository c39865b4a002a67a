// `omnibus bench --num-requests N --long-prompt L` (issue 35's steady pace):
// while the workload's streams decode, one prompt of L random tokens arrives
// (max_tokens 1), and the report says what it did to them: the streams'
// inter-token latencies whose interval overlaps the long prompt's wait for
// its first token ("during") against those between the workload's last first
// token and its arrival ("alone": every stream decoding, no prompt in the
// steps), p50 / p99 and the p99 ratio, and the long prompt's TTFT against
// the same length's TTFT on the idle engine afterwards (fresh tokens: no
// prefix-cache hit). It arrives once every workload request is admitted and
// each running one has kWarmTokens tokens (so "alone" has samples), or when
// the workload ends first. --max-itl-ms is the engine's answer to it.
//
// Thread-safety: the bench's one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/request_stream.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace omnibus {

class LongPromptArrival {
 public:
  using Clock = std::chrono::steady_clock;
  using Span = std::pair<Clock::time_point, Clock::time_point>;  // one ITL interval
  static constexpr int kWarmTokens = 8;

  // prompt: the arriving tokens; alone: as many others, for the idle TTFT.
  LongPromptArrival(std::vector<int32_t> prompt, std::vector<int32_t> alone)
      : prompt_(std::move(prompt)), alone_(std::move(alone)) {}

  bool submitted() const { return stream_ != nullptr; }
  bool done() const { return done_; }
  // Submits the prompt (once). REQUIRES: !submitted().
  Status submit(Engine& e, const std::shared_ptr<StreamSignal>& signal);
  // Takes its pending events; sets done() at its final one.
  Status drain(bool& progressed);
  // After the workload, on the idle engine: the TTFT of `alone`.
  Status measure_alone(Engine& e, const Tokenizer& tok);
  // j["long_prompt"] from the workload streams' ITL intervals; decoding_from:
  // the workload's last first token.
  void report(const std::vector<Span>& itl_spans, Clock::time_point decoding_from,
              nlohmann::json& j) const;
  static void print(const nlohmann::json& j);  // if j has "long_prompt"

 private:
  std::vector<int32_t> prompt_, alone_;
  std::shared_ptr<RequestStream> stream_;
  Clock::time_point first_token_{};
  bool done_ = false;
  double ttft_alone_s_ = 0;
};

}  // namespace omnibus
