// Engine::Impl: the engine's state, and the declarations of the member
// functions that run on the engine thread. Private to src/engine/engine*.cc;
// each group of members lives in a file of its own:
//
//   engine.cc             the public Engine API, the loop (run), step, publish_*
//   engine_create.cc      Engine::create: checks the config, sizes the pool, the tier
//   engine_requests.cc    dispatch (the inbox), accept, fork, finish, finish_embedding,
//   abort_request,
//                         abort_all
//   engine_sampling.cc    sample_all, draw, emit: logits rows -> tokens -> events
//   engine_speculation.cc verify_drafts, propose_drafts: speculative decoding
//   engine_kv_load.cc     start/end_kv_load: KV blocks from outside the pool (kv_load.h)
//   engine_disk_tier.cc   the disk tier's KvLoad; store_finished, spill_evicted, store_block
//   engine_kv_transfer.cc the prefill worker's KvLoad; pin_prompt, export_window, unpin
//
// Ownership: Engine owns its Impl (Engine::impl_). Engine::create builds it
// before the engine thread starts; it is destroyed after that thread is
// joined. Impl owns the KvCache, the Scheduler, every RequestState (and so
// every Sequence), the disk tier and the DraftModel (its KV pool; the draft
// Model itself is the caller's, like the target's).
//
// Thread-safety: the members below run on the engine thread only, and the
// fields marked "engine thread only" are touched by it alone, except:
//   - sample_all runs draw() on the model's pool threads: each call touches
//     only its own sequence's sampler and mask and that thread's scratch row;
//   - masks (GrammarMasks, thread-safe) also gets Engine::submit's first
//     mask of a constrained request, on the caller's thread;
//   - kv's n_bytes(), resident_bytes() and storage()'s region layout are
//     read by Engine::stats and Engine::kv_region from any thread (constant
//     after creation, or thread-safe: kv/kv_storage.h);
//   - disk is thread-safe (Engine::stats reads its stats from any thread).
// Fields "guarded by mu" are shared with client threads (submit, abort,
// unpin, run_on_engine_thread) and with the completion callbacks of KV loads
// (on other threads), all of which post an EngineMessage to `inbox`; cv
// wakes the engine thread.
// Fields "guarded by stats_mu" are read by stats, wait_idle, wait_for_step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "engine/draft_model.h"
#include "engine/engine.h"
#include "engine/grammar_masks.h"
#include "engine/kv_load.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_time_model.h"
#include "kernels/thread_pool.h"
#include "kv/disk_tier.h"
#include "kv/kv_cache.h"
#include "kv/kv_events.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "model/step_batch.h"

namespace omnibus {

using Clock = std::chrono::steady_clock;

// One submitted request; its sequences all exist from submit on, sequence 0
// alone computes the prompt and the others fork from it when it is done.
struct RequestState {
  uint64_t id = 0;
  Request req;
  std::shared_ptr<RequestStream> stream;
  std::vector<std::unique_ptr<Sequence>> seqs;  // [req.n]
  bool forked = false;
  int32_t n_finished = 0;
  std::vector<PromptLogprob> prompt_logprobs;  // positions 1 .. size()
  std::shared_ptr<const KvPinned> pinned;      // pin_prompt_blocks: set when sequence 0 finished
  bool abort_when_loaded = false;  // aborted in kWaitingForKv: abort once its load ended
};

// A request's prompt blocks being loaded from outside the pool (kv_load.h):
// `hold` is a KvCache sequence holding the prefix hit plus the blocks being
// written.
struct KvLoadState {
  int32_t hold = -1;
  std::unique_ptr<KvLoad> load;
};

// The engine thread's inbox: what other threads hand it, in arrival order,
// taken by Engine::Impl::dispatch.
struct SubmitMsg {  // Engine::submit
  std::unique_ptr<RequestState> request;
};
struct AbortMsg {  // Engine::abort
  uint64_t request_id = 0;
};
struct UnpinMsg {  // Engine::unpin
  uint64_t pin_id = 0;
};
struct TaskMsg {  // Engine::run_on_engine_thread, Engine::hold_for_testing
  std::function<void()> run;
};
struct KvLoadDone {  // a KvLoad's done callback
  uint64_t request_id = 0;
  bool ok = false;
};
using EngineMessage = std::variant<SubmitMsg, AbortMsg, UnpinMsg, TaskMsg, KvLoadDone>;

// A prompt pinned for a remote decode worker (Request::pin_prompt_blocks).
struct Pin {
  int32_t seq = -1;  // the KvCache sequence holding the blocks
  int32_t n_blocks = 0;
  int32_t transfer_slot = -1;  // kivi2 window: the exported rows, released at unpin
};

struct Engine::Impl {
  Impl(Model& m, EngineConfig c, std::unique_ptr<KvCache> cache, std::unique_ptr<DiskTier> tier)
      : model(m),
        config(std::move(c)),
        n_vocab(m.config().n_vocab),
        disk(std::move(tier)),
        kv_cache(std::move(cache)),
        kv(*kv_cache),
        scheduler(
            SchedulerConfig{config.max_num_seqs, config.max_num_batched_tokens,
                            config.scheduling_policy, config.max_wait_steps,
                            config.long_prefill_token_threshold, config.max_num_partial_prefills,
                            /*whole_prompts=*/m.pools_whole_prompts(),
                            config.speculative.kind == SpeculativeKind::kNone
                                ? 0
                                : config.speculative.max_step_tokens},
            kv),
        is_eog(size_t(n_vocab), false) {
    for (int32_t id : config.eog_ids) {
      if (id >= 0 && id < n_vocab) is_eog[size_t(id)] = true;
    }
    ThreadPool* pool = model.thread_pool();
    scratch.resize(size_t(pool != nullptr ? pool->n_threads() : 1));
    for (std::vector<float>& v : scratch) v.resize(size_t(n_vocab));
    kv.set_key_mask_for_testing(config.prefix_cache_key_mask_for_testing);
    if (config.on_kv_events) kv.set_event_recorder(&kv_events);
    if (disk != nullptr) kv.set_eviction_sink(&evicted);
  }

  // Takes one message; `stopping`: the loop has ended (shutdown drains the
  // inbox through here: requests are taken without loads, loads end failed).
  // True when it ran a task (which may have changed the cache).
  bool dispatch(EngineMessage& m, bool stopping);
  void post(EngineMessage m);  // from any thread: queue m and wake the engine
  void accept(std::unique_ptr<RequestState> r, bool may_load);
  bool start_kv_load(RequestState& r);
  void end_kv_load(uint64_t id, bool ok);
  std::unique_ptr<KvLoad> make_disk_load(RequestState& r);    // null: no disk tier
  std::unique_ptr<KvLoad> make_import_load(RequestState& r);  // REQUIRES: r.req.kv_import
  void store_finished(Sequence& seq);
  void spill_evicted();
  bool store_block(DiskBlock b, int32_t block);
  void pin_prompt(RequestState& r, Sequence& seq0);
  bool export_window(std::span<const int32_t> blocks, int32_t& slot);
  void unpin(uint64_t pin_id);
  void abort_request(uint64_t id);
  void abort_all();
  void step();
  void note_kv_waste();
  void build_batch(const StepPlan& plan);
  void score_prompts(const StepPlan& plan, std::span<const float> logits);
  void queue_sampling(Sequence& seq, const float* row);
  void fork(RequestState& r);
  // A sequence to sample this step from its logits row.
  struct SampleJob {
    Sequence* seq;
    const float* row;  // [n_vocab]
    SampledToken token;
    double mask_seconds = -1;  // constrained: time spent on the mask (else -1)
  };
  void sample_all(std::vector<SampleJob>& jobs, Clock::time_point now);
  SampledToken draw(Sequence& seq, const float* row, float* scratch_row, double& mask_seconds);
  // Counts a constrained draw's mask time (draw's mask_seconds; < 0: none).
  void record_mask_time(double mask_seconds);
  void emit(Sequence& seq, SampledToken t, Clock::time_point now);
  // Speculative decoding (engine_speculation.cc): a sequence that ran with
  // its draft, and the first of its 1 + n_draft logits rows.
  struct VerifyJob {
    Sequence* seq;
    const float* rows;  // [1 + seq->draft.size(), n_vocab]
  };
  void verify_drafts(std::vector<VerifyJob>& jobs, Clock::time_point now);
  void verify(Sequence& seq, const float* rows, Clock::time_point now);
  void propose_drafts(const StepPlan& plan);
  bool may_speculate(const Sequence& seq) const;
  // A sequence still computing its prompt that will decode with drafts.
  bool drafts_later(const Sequence& seq) const;
  // seq.draft = the speculator's guess of at most k tokens after its output.
  void propose(Sequence& seq, int32_t k);
  // Cuts a constrained sequence's draft before the first token its grammar
  // refuses, and after an end token: nothing past there can be sampled.
  void fit_draft_to_grammar(Sequence& seq);
  void finish(Sequence& seq, FinishReason reason, EngineEvent& event);
  // An embedding request's prompt is computed: its one event, with the
  // pooled row v [n_embd], and its end.
  // Ends an embedding request with its pooled values (one row, or every
  // token's row with pooling none).
  void finish_embedding(Sequence& seq, std::span<const float> v, Clock::time_point now);
  void publish_stats();
  void publish_kv_events();

  // Constant after construction.
  Model& model;
  const EngineConfig config;
  const int32_t n_vocab;

  // The disk tier (null when off); thread-safe. Outlives kv_cache: its
  // writer may still hold blocks gathered from it (copies, not pointers).
  const std::unique_ptr<DiskTier> disk;

  // Engine thread only.
  std::vector<PrefixCache::Evicted> evicted;  // the pool's evictions, not yet spilled to disk
  std::unordered_map<uint64_t, KvLoadState> kv_loads;  // loads started, by request id
  KvEventRecorder kv_events;  // attached to the cache when config.on_kv_events is set
  const std::unique_ptr<KvCache> kv_cache;
  KvCache& kv;  // *kv_cache
  Scheduler scheduler;
  StepTimeModel step_time;            // --max-itl-ms: step wall time against its tokens
  std::unique_ptr<DraftModel> draft;  // --speculative draft (else null); set by create
  std::vector<bool> is_eog;           // [n_vocab]
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests;
  std::vector<uint64_t> done_requests;
  std::unordered_map<uint64_t, Pin> pins;  // by pin id
  uint64_t next_pin_id = 1;
  StepBatch batch;
  std::vector<std::vector<float>> scratch;  // per pool thread: [n_vocab] row being sampled
  std::vector<SampleJob> sample_jobs;       // this step's, in sequence order
  std::vector<VerifyJob> verify_jobs;       // this step's sequences that ran with a draft
  std::vector<DraftModel::Job> draft_jobs;  // this step's draft-model proposals
  std::vector<const float*> last_rows;      // this step's: each plan entry's last logits row
  std::vector<const float*>
      pool_rows;              // this step's: each plan entry's pooled row (embeddings), or null
  GrammarMasks masks;         // next-token masks of constrained sequences
  EngineStats local;          // published to `stats` after each step
  double peak_waste_sum = 0;  // over the steps at peak KV usage
  int64_t n_peak_steps = 0;

  // Guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<EngineMessage> inbox;
  int64_t kv_loads_in_flight = 0;  // KvLoads started whose done has not been called
  uint64_t next_id = 1;
  bool stop = false;
  bool stopped = false;  // the thread has taken its last tasks: no more are accepted

  // Guarded by stats_mu; stats_cv is notified after each publish_stats.
  mutable std::mutex stats_mu;
  mutable std::condition_variable stats_cv;
  EngineStats stats;
  uint64_t n_submitted = 0;  // requests accepted by submit()
};

}  // namespace omnibus
