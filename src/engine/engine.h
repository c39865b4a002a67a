// Engine: continuous batching over a paged KV cache, on its own thread.
//
// The engine thread owns the KV cache (one KvCache: storage, block tables,
// prefix cache and q4/kivi2 residual slots, sized by plan_kv_cache), the
// Scheduler, every Sequence and its Sampler, and uses the Model exclusively.
// Each step: schedule (decodes, prompt chunks, admissions, preemptions) ->
// copy-on-write block copies -> one Model::forward over every scheduled
// sequence -> sample the sequences whose computed tokens caught up -> push
// events to the requests' streams -> free finished sequences' blocks.
// When there is nothing to do it checks the KV invariants and sleeps.
//
// Client side (any thread): submit() validates a Request and returns its
// RequestStream; abort(id) ends a request, its blocks freed within one step.
// Destroying the engine aborts what is left and joins the thread.
//
// Batch invariance: the engine takes the logits rows the model returns
// unchanged; with batch-invariant kernels a sequence's tokens and logits do
// not depend on what else shares its steps or how its prompt was chunked.
//
// Waiting for progress (drain, tests): wait_idle and wait_for_step block on a
// condition variable that the engine thread notifies each time it publishes
// its stats (after every loop iteration), so callers never poll or sleep.
//
// Disk tier (EngineConfig::kv_offload_dir, docs/disk-tier.md): a new
// request whose prompt continues past the pool's prefix hit with blocks on
// disk holds pool blocks for them and waits outside the scheduler while the
// tier's I/O thread reads them (other requests keep running; the load's
// callback wakes this thread); the payloads are then copied in, registered in
// the prefix cache and the request scheduled, where admission finds them. A
// finished request's full blocks, and every cached block allocation reuses
// (before anything overwrites it), are copied out and queued for writing.
// An abort or shutdown waits for a load in flight before freeing its blocks.
//
// Cache control (the /flush_cache and debug endpoints): flush_prefix_cache
// and cached_block_hashes run on the engine thread between two steps (a
// task handed over under the engine's mutex, answered through a promise),
// so they see a consistent cache and never race a step.
//
// Thread-safety: submit, abort, stats, info, wait_idle, wait_for_step,
// flush_prefix_cache and cached_block_hashes may be called from any thread
// concurrently. The Model must not be used by
// anyone else while the engine lives.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/scheduler_policy.h"
#include "engine/speculation.h"
#include "kv/disk_tier.h"
#include "kv/kv_events.h"
#include "kv/kv_format.h"
#include "model/model.h"
#include "util/status.h"

namespace omnibus {

struct EngineConfig {
  int32_t max_num_seqs = 256;            // --max-num-seqs
  int32_t max_num_batched_tokens = 512;  // --max-num-batched-tokens: token budget per step
  int32_t block_size = 16;               // --block-size: token slots per KV block
  int64_t kv_cache_bytes = 0;            // --kv-cache-memory; 0: default_kv_cache_bytes()
  int32_t max_model_len = 0;             // --max-model-len; 0: n_ctx_train capped to the pool
  // max_model_len may exceed the model's training context (perplexity at any
  // --ctx-size, as llama-perplexity allows; vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN).
  bool allow_long_max_model_len = false;
  KvFormat kv_format = KvFormat::kF16;  // --kv-cache-dtype
  int32_t kv_residual_blocks = -1;      // --kv-residual-blocks (q4, kivi2); -1: default
  std::vector<int32_t> eog_ids;         // end-of-generation ids (Tokenizer::eog_ids())
  bool log_startup = true;              // print the pool size on stderr at creation
  bool enable_prefix_caching = true;    // --no-prefix-caching turns it off
  // Prefill side of KV transfer (Request::pin_prompt_blocks): at most this
  // many blocks pinned for decode workers at once, all requests together;
  // a request that would pass it is served unpinned (no offer). -1: no bound;
  // with max_pinned_fraction > 0, that fraction of the pool instead.
  int32_t max_pinned_blocks = -1;
  double max_pinned_fraction = 0.0;
  // Sliding-window KV (kv/kv_layer_groups.h): a model with sliding-window
  // layers keeps, in those layers, only the blocks some token's window still
  // covers. --no-sliding-window-kv turns it off (every layer keeps every
  // token, as before). Also off, with a log line, with the disk tier; the
  // server turns it off for disaggregated roles (whose transfers move every
  // layer of a block).
  bool sliding_window_kv = true;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kCacheAware;  // --scheduling-policy
  int32_t max_wait_steps = 64;  // cache-aware: aging, in engine steps
  // Fair prefill (engine/scheduler.h): prompts with more tokens left than the
  // threshold are long; each long prompt is guaranteed that many tokens a step
  // and gets the budget nobody else wants; at most max_num_partial_prefills
  // long prompts are partially prefilled at once.
  int32_t long_prefill_token_threshold = 0;  // --long-prefill-token-threshold; 0: budget / 4
  int32_t max_num_partial_prefills = 2;      // --max-num-partial-prefills
  // Speculative decoding (engine/speculation.h; --speculative and its flags).
  // Off for encoders (with a log line) and thinking-budget requests; on q4 /
  // kivi2 KV a draft stays inside its block (KvCache::max_draft_in_block).
  SpeculativeConfig speculative;
  // --speculative draft: the draft model (--draft-model; same vocabulary as
  // the target, checked by the caller, which owns it and keeps it alive for
  // the engine's life; it may share the target's thread pool), and its KV
  // pool's size (--draft-kv-cache-memory; 0: as many tokens as the target's
  // pool). Required for kDraft, ignored otherwise.
  Model* draft_model = nullptr;
  int64_t draft_kv_cache_bytes = 0;
  // Steady pace (--max-itl-ms; engine/step_time_model.h): while sequences
  // decode, a step carries prompt chunks only up to the tokens that keep it
  // within this many milliseconds, judged from the steps' measured times (at
  // least StepTimeModel::kMinPromptTokens of prompt a step). 0: off, every
  // step may take max_num_batched_tokens.
  double max_itl_ms = 0;
  // Test hook: with speculation on, proposes every draft in place of the
  // speculator: (the request's prompt, sequence index, its output so far, at
  // most k tokens, the draft to fill).
  std::function<void(std::span<const int32_t>, int32_t, std::span<const int32_t>, int32_t,
                     std::vector<int32_t>&)>
      propose_for_testing;
  // Test hook: >= 0 replaces the measured cost ratio of a draft token
  // (StepTimeModel::cost_ratio; 0: drafts are as free as in a memory-bound
  // step), so draft lengths do not depend on the test machine's timing.
  double spec_cost_ratio_for_testing = -1;
  // Test hook: prefix-cache keys are AND-ed with it (0: every block collides).
  uint64_t prefix_cache_key_mask_for_testing = ~uint64_t(0);

  // The prefix cache's disk tier (kv/disk_tier.h, docs/disk-tier.md): full
  // blocks are written to kv_offload_dir and a prefix that misses in the pool
  // but hits there is loaded instead of recomputed. Off when the dir is
  // empty, when prefix caching is off, for q4/kivi2 (their fp16 residual
  // rows live outside the blocks) and without a model fingerprint (one log
  // line says why).
  std::string kv_offload_dir;                      // --kv-offload-dir
  uint64_t kv_offload_bytes = 8ull << 30;          // --kv-offload-size
  bool kv_offload_finished = true;                 // --no-kv-offload-finished turns it off
  uint64_t model_fingerprint = 0;                  // the disk tier's namespace (gguf_fingerprint)
  DiskTierTestHooks kv_offload_hooks_for_testing;  // test seams of the tier's threads

  // Prefix-cache events (kv/kv_events.h): when set, the engine records every
  // change of the cache's key set and, after each loop iteration that changed
  // it, hands the events over, oldest first, on the engine thread. It must
  // return quickly (queue them; never block on I/O). Unset: nothing recorded.
  std::function<void(std::vector<KvEvent>)> on_kv_events;

  // Debug/test hook, called on the engine thread for every logits row the
  // engine samples from: (request id, sequence index, position of the token
  // whose logits these are, [n_vocab] logits).
  std::function<void(uint64_t, int32_t, int32_t, std::span<const float>)> on_logits;
};

// The KV pool's memory as one region (KvStorage::region), for moving blocks
// between workers: block b of layer l has its K bytes at base + k_offset[l] +
// b * k_block_bytes, its V bytes at base + v_offset[l] + b * v_block_bytes.
// Valid while the engine lives.
struct KvRegionInfo {
  void* base = nullptr;
  size_t bytes = 0;
  int32_t n_blocks = 0;
  std::vector<size_t> k_offset, v_offset;  // [n_layers]
  size_t k_block_bytes = 0, v_block_bytes = 0;
  // kivi2 with a window: bytes of one transfer slot, what a KvPinned's
  // window_bytes must be (KvStorage::transfer_slot_bytes); 0 without a window.
  size_t window_bytes = 0;
};

// Fixed at creation.
struct EngineInfo {
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int64_t kv_cache_bytes = 0;
  int32_t max_model_len = 0;
  int32_t max_num_seqs = 0;  // --max-num-seqs, or fewer (q4/kivi2: the residual slots)
  int32_t max_num_batched_tokens = 0;
  int32_t kv_layer_groups = 1;  // > 1: sliding-window KV (kv/kv_layer_groups.h)
  KvFormat kv_format = KvFormat::kF16;
  int32_t n_vocab = 0;
  bool prefix_caching = false;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  // Embeddings: the model is an encoder (it serves only Request::embed, whole
  // prompts in one step, no prefix caching), its pooling, and whether it can
  // pool at all (embed requests are refused otherwise).
  bool encoder = false;
  bool can_pool = false;
  PoolingType pooling = PoolingType::kUnspecified;
  int32_t n_embd = 0;  // values per pooled vector (Model::pooled_dim: a reranker's scores)
  // Speculative decoding as the engine runs it (kNone where the config asked
  // for it but the model is an encoder).
  SpeculativeKind speculative = SpeculativeKind::kNone;
};

struct EngineStats {
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  // The pool's reserved bytes, and of them those resident in memory (filled
  // in by Engine::stats() at the call: KvStorage::resident_bytes).
  int64_t kv_pool_bytes = 0;
  int64_t kv_resident_bytes = 0;
  int32_t peak_kv_blocks_used = 0;
  double kv_waste_at_peak = 0.0;  // unfilled slots / allocated slots, mean over the steps
                                  // at which the most blocks were in use
  uint64_t n_preemptions = 0;
  // KvCache::check_integrity runs (each time the engine goes idle).
  uint64_t kv_integrity_checks = 0;
  // q4/kivi2: residual-slot claims that had to steal a pinned slot or found
  // none (summed over layers): each makes some reads lossier than the
  // format's definition (kv/kv_quant_kivi.h). 0 in normal operation.
  uint64_t kv_residual_steals = 0;
  uint64_t n_steps = 0;
  uint64_t n_tokens_processed = 0;  // tokens run through the model (prompt, recompute, decode)
  uint64_t n_tokens_generated = 0;  // tokens sampled
  uint64_t n_requests_finished = 0;
  uint64_t n_embeddings = 0;      // embedding requests finished with their vector
  uint64_t n_seqs_scheduled = 0;  // sum over steps of the sequences in the step
  double mean_batch_size = 0.0;   // sequences per step
  double mean_step_tokens = 0.0;  // tokens per step
  // Prefix cache, counted at admission (a resumed preempted sequence counts
  // again): tokens looked up and tokens found cached. Requests that bypass the
  // cache (prompt logprobs) are not counted.
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  double prefix_cache_hit_rate = 0.0;  // hits / queries (0 without queries)
  int32_t kv_blocks_cached = 0;        // full blocks registered in the cache (held or free)
  // Disaggregated prefill/decode (Request::pin_prompt_blocks, kv_import).
  int32_t kv_pins = 0;                    // prompts pinned for a remote decode worker
  int32_t kv_blocks_pinned = 0;           // blocks those pins hold
  uint64_t kv_pins_refused = 0;           // requests served unpinned: max_pinned_blocks reached
  uint64_t kv_imports = 0;                // requests with a KvImport taken in
  uint64_t kv_import_blocks_local = 0;    // of their blocks: found in the prefix cache here
  uint64_t kv_import_blocks_fetched = 0;  // copied from the prefill worker
  uint64_t kv_import_fallbacks = 0;       // imports computed here instead (pool short, copy failed)
  // Structured output (Request::grammar): the time each constrained token
  // spent waiting for and applying its mask, as a histogram with the upper
  // bounds kMaskBounds (+Inf last); rejections: sequences ended because the
  // grammar allowed no token (finish reason grammar_dead_end).
  static constexpr std::array<double, 10> kMaskBounds = {1e-5, 5e-5,   1e-4, 2.5e-4, 5e-4,
                                                         1e-3, 2.5e-3, 5e-3, 1e-2,   5e-2};
  std::array<uint64_t, kMaskBounds.size() + 1> structured_mask_buckets{};  // not cumulative
  uint64_t structured_masks = 0;
  double structured_mask_seconds = 0.0;  // sum
  uint64_t structured_rejections = 0;
  // The prefix cache's disk tier (EngineConfig::kv_offload_dir): prompt tokens
  // and blocks loaded from disk into the pool (they are then also counted in
  // prefix_cache_hits when the request is admitted), load requests started,
  // blocks stored (from finished requests, from pool evictions), and the
  // tier's own counters (filled in by Engine::stats() at the call).
  uint64_t kv_disk_hit_tokens = 0;
  uint64_t kv_disk_hit_blocks = 0;
  uint64_t kv_disk_loads = 0;
  uint64_t kv_disk_stored_finished = 0;
  uint64_t kv_disk_stored_evicted = 0;
  DiskTierStats kv_disk{};
  // Speculative decoding (EngineConfig::speculative), vLLM's counters:
  // verification steps of a sequence that carried a draft, draft tokens
  // verified, of them accepted, and accepted by position in the draft.
  uint64_t spec_drafts = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  std::array<uint64_t, kMaxSpeculativeTokens> spec_accepted_per_pos{};
  // Proposed tokens of constrained sequences cut before verification: the
  // grammar refused them (or what came before them).
  uint64_t spec_grammar_cut_tokens = 0;
  // The draft model's share (--speculative draft): seconds in its forwards,
  // the forwards, and the guesses it made (some never verified: backed off or
  // cut to fit the step).
  double spec_draft_model_seconds = 0;
  uint64_t spec_draft_model_forwards = 0;
  uint64_t spec_draft_model_guesses = 0;

  // Fraction of the pool's blocks in use (0 for an empty pool).
  double kv_cache_usage() const {
    return kv_blocks_total > 0 ? double(kv_blocks_used) / double(kv_blocks_total) : 0.0;
  }
};

class Engine {
 public:
  // Sizes the KV pool (plan_kv_cache, kv/kv_cache_size.h), checks the
  // configuration and starts the thread.
  static StatusOr<std::unique_ptr<Engine>> create(Model& model, EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. kInvalidArgument (empty prompt, ids out of
  // range, sampling parameters, prompt + max_tokens > max_model_len, ...).
  StatusOr<std::shared_ptr<RequestStream>> submit(Request request);
  // Ends the request: its unfinished sequences get a kAbort event and their
  // blocks are freed by the next step. Unknown or finished ids are ignored.
  void abort(uint64_t request_id);
  // Releases the blocks of a pinned prompt (KvPinned::pin_id) within one
  // loop iteration. Unknown ids are ignored.
  void unpin(uint64_t pin_id);
  // The KV pool's memory (for the KV transfer agent to register).
  KvRegionInfo kv_region() const;

  const EngineInfo& info() const { return info_; }
  EngineStats stats() const;

  // Blocks until every request submitted so far (and any submitted while it
  // waits) has finished, its final event pushed, and the stats of the loop
  // iteration that finished the last one are published: then n_running ==
  // n_waiting == 0 and their blocks are back in the pool. Returns those stats,
  // or nullopt when `timeout` passes first.
  std::optional<EngineStats> wait_idle(std::chrono::milliseconds timeout) const;
  // Blocks until the stats of engine step n are published (n_steps >= n).
  // Returns them, or nullopt when `timeout` passes first.
  std::optional<EngineStats> wait_for_step(uint64_t n, std::chrono::milliseconds timeout) const;

  // Drops every block of the prefix cache, between two steps, when no
  // request is running or waiting. Returns false (and drops nothing) while
  // requests are in the engine, or once the engine is shutting down.
  bool flush_prefix_cache();
  // The keys (hash-chain values, PrefixCache) of the blocks in the prefix
  // cache between two steps: the set KV events describe. Empty once the
  // engine is shutting down.
  std::vector<uint64_t> cached_block_hashes();
  // Test seam: the engine thread stops between two steps until the returned
  // promise is set (or destroyed), so that requests submitted meanwhile all
  // arrive before its next step, whatever the threads' timing.
  std::promise<void> hold_for_testing();

  struct Impl;  // engine_impl.h: the engine thread's state

 private:
  Engine(std::unique_ptr<Impl> impl, EngineInfo info);
  void run();  // the engine thread
  // Runs `task` on the engine thread between two steps and waits for it.
  // Returns false, without running it, when the engine has stopped.
  bool run_on_engine_thread(std::function<void(Impl&)> task);

  const EngineInfo info_;
  const std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace omnibus
