// Sequence: the state of one completion stream — pure data, no behaviour
// beyond token lookup (nano-vllm's sequence.py). A request with n > 1 has n
// sequences sharing its prompt.
//
// Token ranges of a sequence, as the scheduler sees them (vLLM v1: there is no
// prefill or decode phase, num_computed_tokens just catches up with num_tokens):
//
//   |<------------------- num_tokens() = prompt + output ------------------->|
//   |<-------- num_computed_tokens: K/V in the cache -------->|<- to compute ->|
//   |<----- this step: chunk of n_new ----->|   (n_new <= budget)
//
//   - after schedule(): the KV table covers num_computed_tokens + n_new slots;
//   - after the step:   num_computed_tokens += n_new; when it reaches
//     num_tokens(), the last row's logits give the next token, which is
//     appended to `output` (so num_tokens() - num_computed_tokens == 1: a
//     "decode" is a chunk of one);
//   - preemption frees every block and sets num_computed_tokens = 0; prompt and
//     output so far are recomputed later, as one long "prompt";
//   - with prefix caching, admission starts num_computed_tokens at the cached
//     run of full blocks (always < num_tokens(): the last token is computed):
//
//   |<-- cached: full blocks matched -->|<------- computed here ------->|
//   |  b7  |  b2  |  b9  |  (shared)    |  b4  | ...
//
//     block_keys memoizes the chain keys of the full blocks (tokens only).
//
// Thread-safety: owned and touched by the engine thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/grammar_masks.h"
#include "engine/sampler.h"
#include "engine/speculation.h"
#include "engine/thinking.h"
#include "grammar/grammar_matcher.h"
#include "kv/prefix_cache.h"

namespace omnibus {

struct RequestState;  // engine_impl.h: the request a sequence belongs to

// A sequence's phase, and who moves it (scheduler.h, kv_load.h, engine_requests.cc):
//
//   submit ──> kWaiting ──admit──> kRunning ──finish──> kFinished
//     │           ^   ^               │  ^
//     │           │   └── kPreempted <┘  │ (blocks freed; recomputed on re-admission)
//     │           │         └──admit─────┘
//     └─ load ─> kWaitingForKv (sequence 0, blocks from disk or a prefill worker)
//
// Sequences 1..n-1 of a request stay kWaiting outside the queue until sequence
// 0's prompt is done, then join kRunning by fork (Scheduler::add_running).
// Any phase but kWaitingForKv may end in kFinished (an abort); an abort in
// kWaitingForKv waits for the load to end.
enum class SeqStatus { kWaiting, kWaitingForKv, kRunning, kPreempted, kFinished };

struct Sequence {
  // Constant after construction.
  RequestState* request = nullptr;
  int32_t index = 0;                             // which of the request's n completions
  const std::vector<int32_t>* prompt = nullptr;  // shared by the request's sequences
  int32_t priority = 0;                          // lower runs first
  uint64_t arrival = 0;                          // submit order (FCFS)
  bool may_use_cached_prefix = true;             // false: compute every token (prompt logprobs)

  // Scheduler state.
  SeqStatus status = SeqStatus::kWaiting;
  int32_t num_computed_tokens = 0;
  int32_t kv_seq = -1;          // KvCache id while it holds blocks, else -1
  uint64_t admitted = 0;        // admission order; the latest admitted is preempted first
  uint64_t scheduled_step = 0;  // last step that scheduled it
  uint64_t arrival_step = 0;    // scheduler step at which it first waited (aging)
  // When the sequence was first scheduled (end of its queue time); unset until then.
  std::chrono::steady_clock::time_point first_scheduled{};
  int32_t num_cached_tokens = 0;     // prompt tokens served from the prefix cache at
                                     // its first admission (EngineEvent::n_cached_tokens)
  std::vector<uint64_t> block_keys;  // prefix-cache keys of full blocks, memoized
  uint64_t cache_root = PrefixCache::kRootKey;  // seed of block_keys: Request::cache_salt's
  int32_t num_imported_tokens = 0;              // prompt tokens fetched from a prefill worker
                                                // (KvImport): not counted as cached

  // Generation state.
  std::vector<int32_t> output;
  std::optional<Sampler> sampler;
  // Structured output (Request::grammar): where the output stands in the
  // grammar, and the mask for the next token, computed ahead (grammar_masks.h).
  std::optional<grammar::GrammarMatcher> matcher;
  std::shared_ptr<GrammarMasks::Pending> next_mask;
  // Where the output stands in the thinking block (Request::thinking).
  ThinkingTracker thinking;
  // Speculative decoding (engine/speculation.h): the tokens guessed to
  // follow the output, proposed after a step and verified in the next one
  // (the scheduler may shorten it to what fits the step); and what its
  // drafts measured. Capacity reserved at submit: the step does not allocate.
  std::vector<int32_t> draft;
  DraftStats draft_stats;
  // A one-token guess made but not verified (drafts backed off: too dear this
  // step); the next token sampled is compared with it, so draft_stats keeps
  // measuring the acceptance for free. -1: none.
  int32_t shadow_draft = -1;

  int32_t num_prompt_tokens() const { return int32_t(prompt->size()); }
  int32_t num_tokens() const { return num_prompt_tokens() + int32_t(output.size()); }
  TokenView tokens() const { return TokenView{*prompt, output, cache_root}; }
  int32_t token_at(int32_t i) const {
    return i < num_prompt_tokens() ? (*prompt)[size_t(i)] : output[size_t(i - num_prompt_tokens())];
  }
};

}  // namespace omnibus
