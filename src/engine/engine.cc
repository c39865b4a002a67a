// Engine's public API (engine/engine.h), the engine thread's loop (run) and
// one step of it: schedule, forward, score prompt logprobs, sample, publish.
#include "engine/engine.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/logprobs.h"
#include "engine/request_validation.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kv/kv_storage.h"
#include "model/step_batch.h"
#include "util/check.h"

namespace omnibus {

Engine::Engine(std::unique_ptr<Impl> impl, EngineInfo info) : info_(info), impl_(std::move(impl)) {
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  thread_.join();
}

namespace {

// The rules of Request::embed against what this engine's model can do.
Status validate_embed(const Request& req, const EngineInfo& info) {
  if (!req.embed) {
    if (info.encoder) {
      return Status::invalid_argument(
          "this model is an embedding model (an encoder): it serves embeddings, not generation");
    }
    return Status::ok();
  }
  if (!info.can_pool) {
    return Status::invalid_argument("this model does not support embeddings (pooling '{}')",
                                    pooling_name(info.pooling));
  }
  if (req.n != 1 || req.grammar != nullptr || req.prompt_logprobs >= 0 || req.pin_prompt_blocks ||
      req.kv_import != nullptr || req.sampling.n_logprobs > 0) {
    return Status::invalid_argument(
        "an embedding request takes no n, grammar, logprobs, pinning or KV import");
  }
  if (int64_t(req.prompt.size()) > info.max_model_len) {
    return Status::invalid_argument(
        "the input ({} tokens) exceeds the maximum context length of {} tokens", req.prompt.size(),
        info.max_model_len);
  }
  return Status::ok();
}

}  // namespace

StatusOr<std::shared_ptr<RequestStream>> Engine::submit(Request req) {
  if (req.embed) req.max_tokens = 1, req.min_tokens = 0;  // no output tokens: the checks' defaults
  OMNIBUS_RETURN_IF_ERROR(validate_embed(req, info_));
  if (std::optional<RequestError> e = validate_request(req, info_.n_vocab, info_.max_model_len)) {
    return Status::invalid_argument("{}", e->message);
  }
  const int32_t n_vocab = info_.n_vocab;
  auto r = std::make_unique<RequestState>();
  r->req = std::move(req);
  for (int32_t i = 0; i < r->req.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = r.get();
    seq->index = i;
    seq->prompt = &r->req.prompt;
    seq->cache_root = PrefixCache::root_key(r->req.cache_salt);
    seq->priority = r->req.priority;
    // Prompt logprobs need the logits of every prompt position: compute them all.
    seq->may_use_cached_prefix = r->req.prompt_logprobs < 0;
    seq->output.reserve(size_t(r->req.max_tokens));
    if (impl_->config.speculative.kind != SpeculativeKind::kNone) {
      seq->draft.reserve(size_t(impl_->config.speculative.num_speculative_tokens));
    }
    SamplingParams params = r->req.sampling;
    if (params.has_seed) params.seed += uint64_t(i);
    seq->sampler.emplace(std::move(params), n_vocab);
    seq->thinking = ThinkingTracker(r->req.thinking.get());
    if (r->req.grammar) {
      seq->matcher.emplace(r->req.grammar->start());
      // The first mask is the same for every sequence: computed once, during
      // the prefill (later, when the thinking block closes).
      if (seq->thinking.next_is_answer()) {
        seq->next_mask =
            i == 0 ? impl_->masks.submit(r->req.grammar, *seq->matcher) : r->seqs[0]->next_mask;
      }
    }
    r->seqs.push_back(std::move(seq));
  }
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    r->id = impl_->next_id++;
    for (auto& seq : r->seqs) seq->arrival = r->id;
    stream = std::make_shared<RequestStream>(r->id, r->req.n, Clock::now());
    r->stream = stream;
    impl_->inbox.emplace_back(SubmitMsg{std::move(r)});
    // Counted before the engine thread can see it, so wait_idle waits for it.
    std::lock_guard<std::mutex> stats_lock(impl_->stats_mu);
    ++impl_->n_submitted;
  }
  impl_->cv.notify_one();
  return stream;
}

void Engine::abort(uint64_t request_id) { impl_->post(AbortMsg{request_id}); }

EngineStats Engine::stats() const {
  EngineStats st;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mu);
    st = impl_->stats;
  }
  if (impl_->disk != nullptr) st.kv_disk = impl_->disk->stats();
  st.kv_pool_bytes = int64_t(impl_->kv.n_bytes());
  st.kv_resident_bytes = int64_t(impl_->kv.resident_bytes());
  return st;
}

namespace {

// Waits on the stats handshake until `done` holds (checked under stats_mu).
template <class Done>
std::optional<EngineStats> wait_stats(const Engine::Impl& s, std::chrono::milliseconds timeout,
                                      Done done) {
  std::unique_lock<std::mutex> lock(s.stats_mu);
  if (!s.stats_cv.wait_for(lock, timeout, done)) return std::nullopt;
  return s.stats;
}

}  // namespace

std::optional<EngineStats> Engine::wait_idle(std::chrono::milliseconds timeout) const {
  const Impl& s = *impl_;
  return wait_stats(s, timeout, [&s] { return s.stats.n_requests_finished == s.n_submitted; });
}

std::optional<EngineStats> Engine::wait_for_step(uint64_t n,
                                                 std::chrono::milliseconds timeout) const {
  const Impl& s = *impl_;
  return wait_stats(s, timeout, [&s, n] { return s.stats.n_steps >= n; });
}

// drain -> dispatch -> step -> publish, until stop; then the same dispatch
// drains what is left (Impl::dispatch's `stopping`).
void Engine::run() {
  Impl& s = *impl_;
  std::vector<EngineMessage> messages;
  bool checked = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(s.mu);
      if (!s.scheduler.has_work() && s.inbox.empty() && !s.stop) {
        if (!checked && s.kv_loads.empty()) {
          // Idle: every block must be back in the pool, but for pinned prompts'.
          lock.unlock();
          s.kv.check_integrity();
          int32_t pinned = 0;
          for (const auto& [id, pin] : s.pins) pinned += pin.n_blocks;
          OMNIBUS_CHECK(s.kv.n_seqs() == int32_t(s.pins.size()) && s.kv.n_used_blocks() <= pinned &&
                        s.requests.empty());
          if (s.draft != nullptr) {  // every sequence gave its draft KV back when it finished
            s.draft->kv().check_integrity();
            OMNIBUS_CHECK(s.draft->kv().n_seqs() == 0 && s.draft->kv().n_used_blocks() == 0);
          }
          ++s.local.kv_integrity_checks;
          s.publish_stats();
          checked = true;
          lock.lock();
        }
        s.cv.wait(lock, [&s] { return s.stop || !s.inbox.empty(); });
      }
      if (s.stop) break;
      messages.swap(s.inbox);
    }
    for (EngineMessage& m : messages) {
      if (s.dispatch(m, /*stopping=*/false)) checked = false;  // a task may have changed the cache
    }
    messages.clear();
    if (s.scheduler.has_work()) {
      s.step();
      checked = false;
    }
    s.publish_kv_events();
    s.publish_stats();
  }
  // Shutting down: what was queued or running is aborted, so no consumer waits
  // forever; tasks still queued run (their callers are waiting on them).
  // Loads in flight write into the pool (fetches) or call back into this
  // engine (disk loads, each a bounded read of local files): wait until each
  // has called done; they then end failed.
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&s] { return s.kv_loads_in_flight == 0; });
    messages.swap(s.inbox);
    s.stopped = true;
  }
  for (EngineMessage& m : messages) s.dispatch(m, /*stopping=*/true);
  s.abort_all();
  std::vector<uint64_t> pin_ids;
  for (const auto& [id, pin] : s.pins) pin_ids.push_back(id);
  for (uint64_t id : pin_ids) s.unpin(id);
  s.publish_stats();
}

bool Engine::run_on_engine_thread(std::function<void(Impl&)> task) {
  OMNIBUS_CHECK(std::this_thread::get_id() != thread_.get_id());  // it would wait for itself
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return false;
    impl_->inbox.emplace_back(TaskMsg{[this, &task, &done] {
      task(*impl_);
      done.set_value();
    }});
  }
  impl_->cv.notify_one();
  finished.wait();
  return true;
}

std::promise<void> Engine::hold_for_testing() {
  std::promise<void> release;
  impl_->post(TaskMsg{[held = release.get_future().share()] { held.wait(); }});
  return release;
}

void Engine::unpin(uint64_t pin_id) { impl_->post(UnpinMsg{pin_id}); }

KvRegionInfo Engine::kv_region() const {
  const KvStorage& st = impl_->kv.storage();
  KvRegionInfo r;
  r.base = st.region();
  r.bytes = st.region_bytes();
  r.n_blocks = int32_t(st.n_blocks());
  for (int il = 0; il < st.geometry().n_layers; ++il) {
    r.k_offset.push_back(st.k_offset(il));
    r.v_offset.push_back(st.v_offset(il));
  }
  r.k_block_bytes = st.k_block_bytes();
  r.v_block_bytes = st.v_block_bytes();
  r.window_bytes = st.transfer_slot_bytes();
  return r;
}

bool Engine::flush_prefix_cache() {
  bool flushed = false;
  const bool ran = run_on_engine_thread([&flushed](Impl& s) {
    if (!s.requests.empty() || s.scheduler.has_work()) return;
    s.kv.clear_prefix_cache();
    flushed = true;
  });
  return ran && flushed;
}

std::vector<uint64_t> Engine::cached_block_hashes() {
  std::vector<uint64_t> keys;
  run_on_engine_thread([&keys](Impl& s) { keys = s.kv.cached_block_keys(); });
  return keys;
}

// One step: plan, forward, apply the outcome, sample.
void Engine::Impl::step() {
  const Clock::time_point start = Clock::now();
  if (config.max_itl_ms > 0) {
    // A draft model's forwards follow the step (timed apart): they take
    // their share of the target first.
    scheduler.set_step_token_cap(
        step_time.token_budget(config.max_itl_ms / 1e3 - (draft ? draft->seconds_per_call() : 0),
                               scheduler.n_decoding(), config.max_num_batched_tokens));
  }
  const StepPlan& plan = scheduler.schedule();
  if (disk != nullptr) spill_evicted();  // before copy_blocks and forward write into them
  if (plan.seqs.empty()) return;
  note_kv_waste();
  kv.copy_blocks(plan.copies);
  build_batch(plan);
  const std::span<const float> logits = model.forward(batch, kv.storage());
  OMNIBUS_CHECK(int64_t(logits.size()) == batch.n_logit_rows() * n_vocab);
  const Clock::time_point now = Clock::now();
  ++local.n_steps;
  local.n_tokens_processed += uint64_t(plan.n_tokens);
  local.n_seqs_scheduled += plan.seqs.size();
  // Embedding requests' pooled rows (model.pooled()), one per pooling entry, in plan order.
  const std::span<const float> pooled = model.pooled();
  const int64_t n_embd = model.pooled_dim();
  OMNIBUS_CHECK(int64_t(pooled.size()) >= batch.n_pool_rows() * n_embd);
  pool_rows.clear();
  int64_t n_pooled = 0;
  for (const StepSeq& ss : batch.seqs) {
    pool_rows.push_back(ss.pool ? pooled.data() + n_pooled * n_embd : nullptr);
    n_pooled += ss.pooled_rows();
  }
  score_prompts(plan, logits);  // before update_from_output advances the sequences
  for (int32_t i : scheduler.update_from_output()) {
    const ScheduledSeq& ss = plan.seqs[size_t(i)];
    if (batch.seqs[size_t(i)].pool) {
      const int64_t n = batch.seqs[size_t(i)].pooled_rows() * n_embd;
      finish_embedding(*ss.seq, {pool_rows[size_t(i)], size_t(n)}, now);  // its last prompt token
    } else if (ss.n_draft > 0) {  // rows for its last token and each draft token
      verify_jobs.push_back({ss.seq, last_rows[size_t(i)] - int64_t(ss.n_draft) * n_vocab});
    } else {
      queue_sampling(*ss.seq, last_rows[size_t(i)]);
    }
  }
  sample_all(sample_jobs, now);
  sample_jobs.clear();
  verify_drafts(verify_jobs, now);
  propose_drafts(plan);
  for (uint64_t id : done_requests) requests.erase(id);
  done_requests.clear();
  // Decodes take one token each; the rest (prompt chunks, drafts) are extra.
  // The draft model's forwards are kept out: their cost is counted per guess.
  step_time.observe(plan.n_decodes, plan.n_tokens - plan.n_decodes,
                    std::chrono::duration<double>(Clock::now() - start).count() -
                        (draft ? draft->last_call_seconds() : 0));
}

// Waste at peak usage: the mean over the steps that hold the peak number of
// blocks (the first such step has just opened fresh blocks, the last has
// nearly filled them).
void Engine::Impl::note_kv_waste() {
  const int32_t used = kv.n_used_blocks();
  if (used < local.peak_kv_blocks_used) return;
  if (used > local.peak_kv_blocks_used) {
    local.peak_kv_blocks_used = used;
    peak_waste_sum = 0;
    n_peak_steps = 0;
  }
  peak_waste_sum += kv.n_unfilled_slots() / (double(used) * double(config.block_size));
  local.kv_waste_at_peak = peak_waste_sum / double(++n_peak_steps);
}

// The plan's tokens, positions and block tables into `batch`.
void Engine::Impl::build_batch(const StepPlan& plan) {
  batch.clear();
  for (const ScheduledSeq& ss : plan.seqs) {
    Sequence& seq = *ss.seq;
    const int32_t first = seq.num_computed_tokens;
    for (int32_t i = 0; i < ss.n_tokens - ss.n_draft; ++i) {
      batch.tokens.push_back(seq.token_at(first + i));
    }
    OMNIBUS_DCHECK(int32_t(seq.draft.size()) == ss.n_draft);
    for (int32_t i = 0; i < ss.n_draft; ++i) batch.tokens.push_back(seq.draft[size_t(i)]);
    const RequestState& r = *seq.request;
    StepSeq step_seq;
    step_seq.n_tokens = ss.n_tokens;
    step_seq.n_past = first;
    const std::span<const int32_t> table = kv.block_table(seq.kv_seq);
    step_seq.block_table = table.data();
    step_seq.n_blocks = int32_t(table.size());
    for (int32_t g = 1; g < kv.n_groups(); ++g) {
      batch.group_tables.push_back(kv.block_table(seq.kv_seq, g).data());
    }
    // Prompt logprobs need the rows of prompt positions not yet scored.
    step_seq.pool = r.req.embed;
    step_seq.pool_all_rows = r.req.embed && model.pooling() == PoolingType::kNone;
    // A draft needs a row per token: each is verified (speculation.h).
    step_seq.all_logits =
        ss.n_draft > 0 || (r.req.prompt_logprobs >= 0 && seq.index == 0 &&
                           int32_t(r.prompt_logprobs.size()) < seq.num_prompt_tokens() - 1 &&
                           first + ss.n_tokens > int32_t(r.prompt_logprobs.size()));
    batch.seqs.push_back(step_seq);
  }
}

// Scores the prompt positions whose rows this step computed (prompt
// logprobs, and the prompt logits sink), and notes each entry's last row in
// last_rows.
void Engine::Impl::score_prompts(const StepPlan& plan, std::span<const float> logits) {
  last_rows.clear();
  int64_t row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const Sequence& seq = *plan.seqs[i].seq;
    const int32_t n = plan.seqs[i].n_tokens;
    const int32_t first = seq.num_computed_tokens;
    RequestState& r = *seq.request;
    if (batch.seqs[i].pool) {  // no logits rows: its row is in model.pooled()
      last_rows.push_back(nullptr);
      continue;
    }
    const bool all_rows = batch.seqs[i].all_logits;
    // Row j holds the logits at position first + j, which score token first + j + 1.
    for (int32_t j = 0; all_rows && j < n; ++j) {
      const int32_t pos = first + j + 1;
      if (pos != int32_t(r.prompt_logprobs.size()) + 1 || pos >= seq.num_prompt_tokens()) continue;
      r.prompt_logprobs.push_back(token_logprob(logits.data() + (row + j) * n_vocab, n_vocab,
                                                seq.token_at(pos), r.req.prompt_logprobs));
      if (r.req.prompt_logits_sink) {
        r.req.prompt_logits_sink->consume(
            pos - 1, logits.subspan(size_t((row + j) * n_vocab), size_t(n_vocab)));
      }
    }
    row += all_rows ? n : 1;
    last_rows.push_back(logits.data() + (row - 1) * n_vocab);
  }
}

// `seq`'s next token is due from logits row `row`: the first time a request
// with n > 1 gets there, its prompt is done and the other sequences fork
// from it, all sampling from that row.
void Engine::Impl::queue_sampling(Sequence& seq, const float* row) {
  RequestState& r = *seq.request;
  if (seq.index == 0 && !r.forked && r.req.n > 1) {
    fork(r);
    for (auto& s : r.seqs) sample_jobs.push_back({s.get(), row, {}});
  } else {
    r.forked = true;
    sample_jobs.push_back({&seq, row, {}});
  }
}

void Engine::Impl::publish_kv_events() {
  if (!kv_events.empty()) config.on_kv_events(kv_events.take());
}

void Engine::Impl::publish_stats() {
  local.n_running = scheduler.n_running();
  local.n_waiting = scheduler.n_waiting();
  local.kv_blocks_used = kv.n_used_blocks();
  local.n_preemptions = scheduler.n_preemptions();
  local.kv_residual_steals = kv.n_residual_steals();
  local.prefix_cache_queries = scheduler.n_prefix_cache_queries();
  local.prefix_cache_hits = scheduler.n_prefix_cache_hits();
  local.prefix_cache_hit_rate =
      local.prefix_cache_queries == 0
          ? 0.0
          : double(local.prefix_cache_hits) / double(local.prefix_cache_queries);
  local.kv_blocks_cached = kv.n_cached_blocks();
  local.kv_pins = int32_t(pins.size());
  local.kv_blocks_pinned = 0;
  for (const auto& [id, pin] : pins) local.kv_blocks_pinned += pin.n_blocks;
  if (local.n_steps > 0) {
    local.mean_batch_size = double(local.n_seqs_scheduled) / double(local.n_steps);
    local.mean_step_tokens = double(local.n_tokens_processed) / double(local.n_steps);
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats = local;
  }
  stats_cv.notify_all();
}

}  // namespace omnibus
