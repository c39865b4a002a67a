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
  const int32_t n_vocab = info_.n_vocab;
  if (req.prompt.empty()) return Status::invalid_argument("the prompt is empty");
  OMNIBUS_RETURN_IF_ERROR(validate_embed(req, info_));
  if (req.embed) req.max_tokens = 1, req.min_tokens = 0;  // the slot the checks below count
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= n_vocab) {
      return Status::invalid_argument("prompt token id {} is outside the vocabulary [0, {})", t,
                                      n_vocab);
    }
  }
  for (int32_t t : req.stop_token_ids) {
    if (t < 0 || t >= n_vocab) {
      return Status::invalid_argument("stop token id {} is outside the vocabulary [0, {})", t,
                                      n_vocab);
    }
  }
  if (req.max_tokens < 1)
    return Status::invalid_argument("max_tokens must be >= 1, got {}", req.max_tokens);
  if (req.min_tokens < 0 || req.min_tokens > req.max_tokens) {
    return Status::invalid_argument("min_tokens must be in [0, max_tokens = {}], got {}",
                                    req.max_tokens, req.min_tokens);
  }
  if (req.n < 1 || req.n > 128)
    return Status::invalid_argument("n must be in [1, 128], got {}", req.n);
  if (req.grammar != nullptr && req.grammar->n_vocab() != n_vocab) {
    return Status::invalid_argument("the grammar's vocabulary has {} tokens, the model {}",
                                    req.grammar->n_vocab(), n_vocab);
  }
  if (req.prompt_logprobs < -1 || req.prompt_logprobs > 20) {
    return Status::invalid_argument("prompt_logprobs must be in [0, 20], got {}",
                                    req.prompt_logprobs);
  }
  if (req.prompt_logits_sink && req.prompt_logprobs < 0) {
    return Status::invalid_argument("a prompt logits sink needs prompt_logprobs >= 0");
  }
  OMNIBUS_RETURN_IF_ERROR(validate(req.sampling, n_vocab));
  if (req.kv_import != nullptr) {
    const KvImport& im = *req.kv_import;
    if (im.n_blocks < 0 || !im.fetch || !im.finished) {
      return Status::invalid_argument("kv_import needs n_blocks >= 0, fetch and finished");
    }
  }
  const int64_t total = int64_t(req.prompt.size()) + (req.embed ? 0 : req.max_tokens);
  if (total > info_.max_model_len) {
    return Status::invalid_argument(
        "prompt ({} tokens) + max_tokens ({}) = {} tokens exceeds the maximum context length of {} "
        "tokens",
        req.prompt.size(), req.max_tokens, total, info_.max_model_len);
  }

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
    SamplingParams params = r->req.sampling;
    if (params.has_seed) params.seed += uint64_t(i);
    seq->sampler.emplace(std::move(params), n_vocab);
    if (r->req.grammar) {
      seq->matcher.emplace(r->req.grammar->start());
      // The first mask is the same for every sequence: computed once, during the prefill.
      seq->next_mask =
          i == 0 ? impl_->masks.submit(r->req.grammar, *seq->matcher) : r->seqs[0]->next_mask;
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
    impl_->inbox.push_back(std::move(r));
    // Counted before the engine thread can see it, so wait_idle waits for it.
    std::lock_guard<std::mutex> stats_lock(impl_->stats_mu);
    ++impl_->n_submitted;
  }
  impl_->cv.notify_one();
  return stream;
}

void Engine::abort(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->aborts.push_back(request_id);
  }
  impl_->cv.notify_one();
}

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

void Engine::run() {
  Impl& s = *impl_;
  std::vector<std::unique_ptr<RequestState>> incoming;
  std::vector<uint64_t> aborts;
  std::vector<std::function<void()>> tasks;
  bool checked = false;
  std::vector<uint64_t> unpins;
  std::vector<std::pair<uint64_t, bool>> imports_done;
  std::vector<uint64_t> disk_loads_done;
  const auto has_input = [&s] {
    return s.stop || !s.inbox.empty() || !s.aborts.empty() || !s.tasks.empty() ||
           !s.unpins.empty() || !s.imports_done.empty() || !s.disk_loads_done.empty();
  };
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(s.mu);
      if (!s.scheduler.has_work() && !has_input()) {
        if (!checked && s.importing.empty() && s.disk_loading.empty()) {
          // Idle: every block must be back in the pool, but for pinned prompts'.
          lock.unlock();
          s.kv.check_integrity();
          int32_t pinned = 0;
          for (const auto& [id, pin] : s.pins) pinned += pin.n_blocks;
          OMNIBUS_CHECK(s.kv.n_seqs() == int32_t(s.pins.size()) && s.kv.n_used_blocks() <= pinned &&
                        s.requests.empty());
          ++s.local.kv_integrity_checks;
          s.publish_stats();
          checked = true;
          lock.lock();
        }
        s.cv.wait(lock, has_input);
      }
      if (s.stop) break;
      incoming.swap(s.inbox);
      aborts.swap(s.aborts);
      tasks.swap(s.tasks);
      unpins.swap(s.unpins);
      imports_done.swap(s.imports_done);
      disk_loads_done.swap(s.disk_loads_done);
    }
    for (const auto& [id, ok] : imports_done) s.end_import(id, ok);
    imports_done.clear();
    for (uint64_t id : disk_loads_done) s.end_disk_load(id);
    disk_loads_done.clear();
    for (uint64_t id : unpins) s.unpin(id);
    unpins.clear();
    for (auto& r : incoming) s.accept(std::move(r));
    incoming.clear();
    for (uint64_t id : aborts) s.abort_request(id);
    aborts.clear();
    for (auto& t : tasks) t();
    if (!tasks.empty())
      checked = false;  // a task may have changed the cache: check it again when idle
    tasks.clear();
    if (s.scheduler.has_work()) {
      s.step();
      checked = false;
    }
    s.publish_kv_events();
    s.publish_stats();
  }
  // Shutting down: what was queued or running is aborted, so no consumer waits
  // forever; tasks still queued run (their callers are waiting on them).
  // Fetches in flight write into the pool: wait until each has called done.
  // Disk loads in flight call back into this engine: wait for them too (each
  // is a bounded read of local files).
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&s] { return s.imports_in_flight == 0 && s.disk_loads_in_flight == 0; });
    incoming.swap(s.inbox);
    tasks.swap(s.tasks);
    imports_done.swap(s.imports_done);
    disk_loads_done.swap(s.disk_loads_done);
    s.stopped = true;
  }
  for (const auto& [id, ok] : imports_done) s.end_import(id, false);
  for (uint64_t id : disk_loads_done) s.end_disk_load(id);
  for (auto& r : incoming) {
    r->req.kv_import.reset();  // nothing is fetched any more
    s.accept(std::move(r));
  }
  s.abort_all();
  std::vector<uint64_t> pin_ids;
  for (const auto& [id, pin] : s.pins) pin_ids.push_back(id);
  for (uint64_t id : pin_ids) s.unpin(id);
  for (auto& t : tasks) t();
  s.publish_stats();
}

bool Engine::run_on_engine_thread(std::function<void(Impl&)> task) {
  OMNIBUS_CHECK(std::this_thread::get_id() != thread_.get_id());  // it would wait for itself
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return false;
    impl_->tasks.push_back([this, &task, &done] {
      task(*impl_);
      done.set_value();
    });
  }
  impl_->cv.notify_one();
  finished.wait();
  return true;
}

void Engine::unpin(uint64_t pin_id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->unpins.push_back(pin_id);
  }
  impl_->cv.notify_one();
}

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

void Engine::Impl::step() {
  const StepPlan& plan = scheduler.schedule();
  if (disk != nullptr) spill_evicted();  // before copy_blocks and forward write into them
  if (plan.seqs.empty()) return;
  // Waste at peak usage: the mean over the steps that hold the peak number of
  // blocks (the first such step has just opened fresh blocks, the last has
  // nearly filled them).
  const int32_t used = kv.n_used_blocks();
  if (used >= local.peak_kv_blocks_used) {
    if (used > local.peak_kv_blocks_used) {
      local.peak_kv_blocks_used = used;
      peak_waste_sum = 0;
      n_peak_steps = 0;
    }
    peak_waste_sum += kv.n_unfilled_slots() / (double(used) * double(config.block_size));
    local.kv_waste_at_peak = peak_waste_sum / double(++n_peak_steps);
  }
  kv.copy_blocks(plan.copies);

  batch.clear();
  for (const ScheduledSeq& ss : plan.seqs) {
    Sequence& seq = *ss.seq;
    const int32_t first = seq.num_computed_tokens;
    for (int32_t i = 0; i < ss.n_tokens; ++i) batch.tokens.push_back(seq.token_at(first + i));
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
    step_seq.all_logits = r.req.prompt_logprobs >= 0 && seq.index == 0 &&
                          int32_t(r.prompt_logprobs.size()) < seq.num_prompt_tokens() - 1 &&
                          first + ss.n_tokens > int32_t(r.prompt_logprobs.size());
    batch.seqs.push_back(step_seq);
  }
  const std::span<const float> logits = model.forward(batch, kv.storage());
  OMNIBUS_CHECK(int64_t(logits.size()) == batch.n_logit_rows() * n_vocab);
  const std::span<const float> pooled = model.pooled();
  const int64_t n_embd = model.pooled_dim();
  OMNIBUS_CHECK(int64_t(pooled.size()) >= batch.n_pool_rows() * n_embd);
  int64_t pool_row = 0;
  const Clock::time_point now = Clock::now();

  ++local.n_steps;
  local.n_tokens_processed += uint64_t(plan.n_tokens);
  local.n_seqs_scheduled += plan.seqs.size();

  int64_t row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Sequence& seq = *plan.seqs[i].seq;
    const int32_t n = plan.seqs[i].n_tokens;
    const int32_t first = seq.num_computed_tokens;
    seq.num_computed_tokens += n;
    OMNIBUS_DCHECK(kv.n_tokens(seq.kv_seq) == seq.num_computed_tokens);
    // Blocks that just became full (K/V written) join the prefix cache; then
    // the sliding-window groups let go of what no later token can see.
    kv.commit(seq.kv_seq, seq.tokens(), seq.num_computed_tokens, seq.block_keys);
    kv.slide(seq.kv_seq, seq.num_computed_tokens);
    RequestState& r = *seq.request;
    if (batch.seqs[i].pool) {
      const float* v = pooled.data() + (pool_row++) * n_embd;
      // Mid-prompt chunk (a decoder): its row is not the last token's.
      if (seq.num_computed_tokens == seq.num_tokens()) finish_embedding(seq, v, now);
      continue;
    }
    const int64_t n_rows = batch.seqs[i].all_logits ? n : 1;
    if (batch.seqs[i].all_logits) {
      // Row j holds the logits at position first + j, which score token first + j + 1.
      for (int32_t j = 0; j < n; ++j) {
        const int32_t pos = first + j + 1;
        if (pos != int32_t(r.prompt_logprobs.size()) + 1 || pos >= seq.num_prompt_tokens())
          continue;
        r.prompt_logprobs.push_back(token_logprob(logits.data() + (row + j) * n_vocab, n_vocab,
                                                  seq.token_at(pos), r.req.prompt_logprobs));
        if (r.req.prompt_logits_sink) {
          r.req.prompt_logits_sink->consume(
              pos - 1, logits.subspan(size_t((row + j) * n_vocab), size_t(n_vocab)));
        }
      }
    }
    const float* last = logits.data() + (row + n_rows - 1) * n_vocab;
    row += n_rows;
    if (seq.num_computed_tokens < seq.num_tokens()) continue;  // mid-prompt chunk
    if (seq.index == 0 && !r.forked && r.req.n > 1) {
      fork(r);
      for (auto& s : r.seqs) sample_jobs.push_back({s.get(), last, {}});
    } else {
      r.forked = true;
      sample_jobs.push_back({&seq, last, {}});
    }
  }
  sample_all(sample_jobs, now);
  sample_jobs.clear();
  for (uint64_t id : done_requests) requests.erase(id);
  done_requests.clear();
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
