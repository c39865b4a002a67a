// Request and EngineEvent: what goes into the engine and what comes out.
//
// A Request is token ids plus generation rules; text, chat templates and stop
// strings are the server's business (it detokenizes the events and calls
// Engine::abort when a stop string appears). An EngineEvent is one sampled
// token of one of the request's n sequences, or a sequence's end.
//
// Thread-safety: values.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampler.h"
#include "engine/thinking.h"
#include "grammar/token_mask.h"

namespace omnibus {

// Decode side of disaggregated prefill/decode (docs/disaggregation.md): the
// prompt's first n_blocks full blocks were computed by another worker and can
// be fetched into this engine's pool instead of being recomputed. The engine
// matches its own prefix cache first and fetches only the blocks it lacks;
// blocks that land join the prefix cache, so the request then starts exactly
// as after a local prefix-cache hit (same outputs as a local prefill).
struct KvImport {
  int32_t n_blocks = 0;
  // Engine thread: start copying the prompt's blocks [first, first +
  // local.size()) into the pool's blocks `local` (in order) and return; call
  // done(ok) exactly once, from any thread, after the last byte landed or
  // the copy failed. The blocks stay reserved until then.
  // window_dst_offset >= 0 (kivi2 with a window, KvStorage's transfer
  // slots): also copy the source's exported window rows (KvPinned::
  // window_offset, window_bytes) to that offset of this engine's KV region;
  // -1: no rows are needed. `local` may then be empty: the blocks are all
  // cached here but the last W lack their rows (only these move).
  std::function<void(int32_t first, std::vector<int32_t> local, int64_t window_dst_offset,
                     std::function<void(bool ok)> done)>
      fetch;
  // Engine thread, exactly once, when the engine is done with the source:
  // n_local blocks were already cached here, n_fetched were copied (0 when
  // none were needed, the pool was short, or the copy failed: `failed`).
  std::function<void(int32_t n_local, int32_t n_fetched, bool failed)> finished;
};

// Prefill side: the prompt's full blocks, kept (pinned) after the request
// finished until Engine::unpin(pin_id), for a remote decode worker to read.
struct KvPinned {
  uint64_t pin_id = 0;
  std::vector<int32_t> blocks;  // block ids in this engine's pool, prompt order
  std::vector<uint64_t> keys;   // their prefix-cache keys (PrefixCache::chain_key chain)
  // kivi2 with a window of W blocks: the fp16 window rows of the last W
  // pinned blocks, exported into a transfer slot (KvStorage::
  // export_window_rows layout) at this offset of the KV region, for as long
  // as the pin lasts; -1 / 0 when the format has no window or nothing is pinned.
  int64_t window_offset = -1;
  uint64_t window_bytes = 0;
};

// Receives the full logits of a request's prompt positions, for evaluation
// tools (`omnibus perplexity --kl-divergence-base`): consume(p, logits) with
// the [n_vocab] logits at prompt position p (which score token p + 1), for
// every p in [0, n_prompt - 2], once each and in order. Called on the engine
// thread: it must not block, and the span is valid only during the call.
class PromptLogitsSink {
 public:
  virtual ~PromptLogitsSink() = default;
  virtual void consume(int32_t position, std::span<const float> logits) = 0;
};

struct Request {
  std::vector<int32_t> prompt;          // token ids, non-empty
  SamplingParams sampling;              // sampling.n_logprobs: alternatives per output token
  int32_t max_tokens = 16;              // >= 1; prompt + max_tokens <= the engine's max_model_len
  int32_t min_tokens = 0;               // EOG and stop_token_ids are suppressed until reached
  std::vector<int32_t> stop_token_ids;  // end the sequence (finish reason kStop)
  bool ignore_eos = false;              // do not stop on end-of-generation tokens
  int32_t n = 1;                        // parallel completions sharing the prompt's KV blocks;
                                        // with a seed, sequence i uses seed + i
  int32_t priority = 0;                 // lower runs first (ties: first come, first served)
  // Tenant isolation in the prefix cache (vLLM's cache_salt): requests share
  // cached blocks only with requests of the same salt ("" shares with "").
  std::string cache_salt;
  int32_t prompt_logprobs = -1;  // -1: none; k >= 0: logprob of every prompt token
                                 // (from the second on) plus the top k alternatives
  std::shared_ptr<PromptLogitsSink> prompt_logits_sink;  // needs prompt_logprobs >= 0
  // Prefill side: pin the prompt's full blocks (all but the last token's) when
  // sequence 0 finishes; the final event carries them (EngineEvent::pinned).
  bool pin_prompt_blocks = false;
  std::shared_ptr<KvImport> kv_import;  // decode side; null: compute the prompt here
  // Structured output (grammar/structured_output.h): every sampled token must
  // keep the output inside this grammar; tokens it forbids are masked before
  // any other sampling stage, end tokens are allowed only where the grammar
  // may end, and once it is complete only end tokens are. null: free text.
  std::shared_ptr<const grammar::TokenMasker> grammar;
  // A reasoning model's thinking block (engine/thinking.h): the hard budget,
  // the grammar applied to the answer only, and EngineEvent::n_reasoning_tokens.
  // null: no block.
  std::shared_ptr<const ThinkingRule> thinking;
  // An embedding request (docs/embeddings.md): prompt only. The model pools
  // its last hidden states (Model::pooled) in the step that computes the last
  // prompt token; the request then ends at once, with one final event that
  // carries the embedding and no token, and frees its KV blocks in that step.
  // REQUIRES n == 1, no grammar, logprobs, pinning or import; max_tokens,
  // min_tokens and sampling are ignored.
  bool embed = false;
  // Speculative decoding (engine/speculation.h) when the engine has it on:
  // false keeps this request out of it (its output is the same either way).
  bool speculative = true;
};

// kGrammarDeadEnd: structured output (Request::grammar) the matcher could not
// continue (no token of the vocabulary continues the grammar, or the matcher
// exceeded its bounds); the output does NOT match the format. kStop with a
// grammar means the output is complete and matches.
enum class FinishReason { kNone, kStop, kLength, kAbort, kGrammarDeadEnd };
// "", "stop", "length", "abort", "grammar_dead_end"
const char* finish_reason_name(FinishReason r);

// The logprob of one prompt token given the tokens before it.
struct PromptLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 + the ids ahead of `token` (higher logit, or equal and lower id)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // (id, logprob), best first
};

struct EngineEvent {
  using Clock = std::chrono::steady_clock;

  int32_t seq_index = 0;  // which of the request's n sequences
  int32_t token = -1;     // the sampled token; -1 for an event without one (abort)
  float logprob = 0.0f;   // raw log-softmax of the sampled token
  std::vector<std::pair<int32_t, float>> top_logprobs;  // [sampling.n_logprobs]
  // kNone while the sequence goes on. kStop: `token` is the EOG or stop token
  // that ended it (the server does not print it); kLength: max_tokens reached;
  // kAbort: aborted (token == -1); kGrammarDeadEnd: `token` is the one the
  // grammar rejected (not printed either).
  FinishReason finish = FinishReason::kNone;
  bool final = false;  // the request's last event: every sequence has finished

  int32_t n_prompt_tokens = 0;
  int32_t n_cached_tokens = 0;     // prompt tokens served from the prefix cache at the
                                   // sequence's first admission (OpenAI's
                                   // usage.prompt_tokens_details.cached_tokens); the
                                   // same in every event of the sequence
  int32_t n_output_tokens = 0;     // this sequence's tokens so far, this one included
  int32_t n_reasoning_tokens = 0;  // of those, the thinking block's (Request::thinking)

  // Only in sequence 0's first token event, when the request asked for it:
  // entries for prompt positions 1 .. n_prompt_tokens - 1.
  std::vector<PromptLogprob> prompt_logprobs;

  // The request's final event, when it asked for pin_prompt_blocks and
  // finished normally: what is pinned (null otherwise).
  std::shared_ptr<const KvPinned> pinned;

  // An embedding request's final event: the pooled vector, [pooled_dim], not
  // normalised (token == -1, finish == kStop); with rank pooling the scores.
  std::vector<float> embedding;
  Clock::time_point time;             // when the engine step that produced it finished
  Clock::time_point first_scheduled;  // when the sequence first entered a step (queue time
                                      // ends); unset if it never did (aborted while waiting)
};

}  // namespace omnibus
