#include "engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <future>
#include <limits>
#include <unordered_map>

#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kernels/thread_pool.h"
#include "kv/disk_tier.h"
#include "kv/kv_block_io.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_size.h"
#include "kv/kv_layer_groups.h"
#include "kv/kv_storage.h"
#include "util/check.h"

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
  bool importing = false;                      // kv_import: blocks being fetched, not yet scheduled
  bool abort_after_import = false;  // aborted while importing or loading: abort once it ended
  bool disk_loading = false;  // prompt blocks being read from the disk tier, not yet scheduled
};

// A request's prompt blocks being read from the disk tier: `hold` is a
// KvCache sequence holding the pool's prefix hit (n_local blocks) plus
// n_disk blocks the payloads are scattered into when the load is done.
struct DiskLoadState {
  int32_t hold = -1;
  int32_t n_local = 0;
  int32_t n_disk = 0;
  std::shared_ptr<const DiskLoad> load;
};

// A request's prompt blocks being fetched (KvImport): `hold` is a KvCache
// sequence holding the local prefix hit plus the blocks being written.
struct ImportState {
  int32_t hold = -1;
  int32_t n_local = 0;         // blocks already cached here
  int32_t n_blocks = 0;        // blocks the request will start after
  int32_t transfer_slot = -1;  // kivi2 window: where the rows land (KvStorage transfer slot)
};

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
                            config.long_prefill_token_threshold, config.max_num_partial_prefills},
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

  void accept(std::unique_ptr<RequestState> r);
  bool start_disk_load(RequestState& r);
  void end_disk_load(uint64_t id);
  void store_finished(Sequence& seq);
  void spill_evicted();
  bool store_block(DiskBlock b, int32_t block);
  void start_import(RequestState& r);
  void end_import(uint64_t id, bool ok);
  void pin_prompt(RequestState& r, Sequence& seq0);
  bool export_window(std::span<const int32_t> blocks, int32_t& slot);
  void unpin(uint64_t pin_id);
  void abort_request(uint64_t id);
  void abort_all();
  void step();
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
  void emit(Sequence& seq, SampledToken t, Clock::time_point now);
  void finish(Sequence& seq, FinishReason reason, EngineEvent& event);
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
  std::unordered_map<uint64_t, DiskLoadState> disk_loading;  // by request id
  KvEventRecorder kv_events;  // attached to the cache when config.on_kv_events is set
  const std::unique_ptr<KvCache> kv_cache;
  KvCache& kv;  // *kv_cache
  Scheduler scheduler;
  std::vector<bool> is_eog;  // [n_vocab]
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests;
  std::vector<uint64_t> done_requests;
  std::unordered_map<uint64_t, ImportState> importing;  // by request id
  std::unordered_map<uint64_t, Pin> pins;               // by pin id
  uint64_t next_pin_id = 1;
  StepBatch batch;
  std::vector<std::vector<float>> scratch;  // per pool thread: [n_vocab] row being sampled
  std::vector<SampleJob> sample_jobs;       // this step's, in sequence order
  GrammarMasks masks;                       // next-token masks of constrained sequences
  EngineStats local;                        // published to `stats` after each step
  double peak_waste_sum = 0;                // over the steps at peak KV usage
  int64_t n_peak_steps = 0;

  // Guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<RequestState>> inbox;
  std::vector<uint64_t> aborts;
  std::vector<std::function<void()>> tasks;  // run_on_engine_thread, in order
  std::vector<uint64_t> unpins;
  std::vector<std::pair<uint64_t, bool>> imports_done;  // (request id, ok) from KvImport::fetch
  int64_t imports_in_flight = 0;          // fetches started whose done has not been called
  std::vector<uint64_t> disk_loads_done;  // request ids whose DiskLoad is done
  int64_t disk_loads_in_flight = 0;       // loads started whose on_done has not run
  uint64_t next_id = 1;
  bool stop = false;
  bool stopped = false;  // the thread has taken its last tasks: no more are accepted

  // Guarded by stats_mu; stats_cv is notified after each publish_stats.
  mutable std::mutex stats_mu;
  mutable std::condition_variable stats_cv;
  EngineStats stats;
  uint64_t n_submitted = 0;  // requests accepted by submit()
};

namespace {

// The tokens of block b of `seq` (block_size bs).
std::vector<int32_t> block_tokens(const Sequence& seq, int32_t b, int32_t bs) {
  std::vector<int32_t> t(static_cast<size_t>(bs));
  for (int32_t j = 0; j < bs; ++j) t[size_t(j)] = seq.token_at(b * bs + j);
  return t;
}

// The hash-chain key block b continues from (kRootKey for block 0).
uint64_t parent_key(std::span<const uint64_t> keys, int32_t b) {
  return b == 0 ? PrefixCache::kRootKey : keys[size_t(b - 1)];
}

// The layer groups of the pool: hybrid for a model with sliding-window layers
// that reads them through their own tables (a log line when the config asks
// for it but it cannot be used), uniform otherwise.
KvLayerGroups kv_layer_groups(const Model& model, const EngineConfig& config) {
  const ModelConfig& mc = model.config();
  const KvLayerGroups uniform = KvLayerGroups::uniform(mc.n_layer);
  if (!config.sliding_window_kv || mc.sliding_window <= 0 || !model.supports_sliding_window_kv()) {
    return uniform;
  }
  std::vector<bool> is_swa(size_t(mc.n_layer));
  for (int il = 0; il < mc.n_layer; ++il) is_swa[size_t(il)] = mc.is_swa_layer(il);
  KvLayerGroups groups = KvLayerGroups::hybrid(is_swa, mc.sliding_window);
  if (groups.is_hybrid() && !config.kv_offload_dir.empty()) {
    if (config.log_startup) {
      fmt::print(stderr,
                 "sliding-window KV: off (the disk tier stores blocks of every layer); every "
                 "layer keeps every token\n");
    }
    return uniform;
  }
  return groups;
}

// The start-up line of a hybrid pool: its groups, and what a sequence of
// max_model_len costs against the uniform layout.
void log_sliding_window_kv(const KvLayerGroups& groups, const KvGeometry& g, int n_layers,
                           int64_t n_blocks, int32_t max_model_len) {
  const int64_t hybrid = groups.blocks_per_seq(max_model_len, g.block_size);
  const size_t block_bytes = g.bytes_per_block();
  const size_t layer_block_bytes = block_bytes / size_t(g.n_layers);
  // The uniform layout: every layer holds every block of the sequence.
  const int64_t full_blocks = (int64_t(max_model_len) + g.block_size - 1) / g.block_size;
  const double seq_mib = double(hybrid) * double(block_bytes) / (1 << 20);
  const double full_mib =
      double(full_blocks) * double(n_layers) * double(layer_block_bytes) / (1 << 20);
  const int64_t pool_layer_blocks = n_blocks * g.n_layers;
  const int64_t fit = n_blocks / std::max<int64_t>(hybrid, 1);
  const int64_t fit_full = pool_layer_blocks / std::max<int64_t>(full_blocks * n_layers, 1);
  fmt::print(stderr,
             "sliding-window KV: {} layer groups of {} layers (window {}): a sequence of max "
             "model len {} holds {:.1f} MiB ({:.0f}% of {:.1f} MiB); the pool fits {} such "
             "sequences, {} tokens ({} sequences, {} tokens without)\n",
             groups.n_groups(), groups.n_tensors(), groups.window(1), max_model_len, seq_mib,
             100.0 * seq_mib / full_mib, full_mib, fit, fit * max_model_len, fit_full,
             fit_full * max_model_len);
}

// The disk tier the config asks for, or null (with a log line when it was
// asked for but cannot work with this cache).
std::unique_ptr<DiskTier> make_disk_tier(const EngineConfig& config, KvCache& kv) {
  if (config.kv_offload_dir.empty()) return nullptr;
  const KvStorage& st = kv.storage();
  const KvGeometry& g = st.geometry();
  const char* why = nullptr;
  if (!kv.prefix_caching()) {
    why = "prefix caching is off";
  } else if (!kv_block_io_supported(g)) {
    why = "the KV format keeps fp16 residual rows outside its blocks (q4, kivi2)";
  } else if (config.model_fingerprint == 0) {
    why = "the model has no fingerprint";
  }
  if (why != nullptr) {
    fmt::print(stderr, "kv disk tier: off ({}); --kv-offload-dir {} ignored\n", why,
               config.kv_offload_dir);
    return nullptr;
  }
  DiskTierConfig dc;
  dc.dir = config.kv_offload_dir;
  dc.max_bytes = config.kv_offload_bytes;
  dc.ns.model_fingerprint = config.model_fingerprint;
  dc.ns.format = g.format;
  dc.ns.block_size = g.block_size;
  dc.ns.n_layers = g.n_layers;
  dc.ns.n_kv_heads = g.n_kv_heads;
  dc.ns.head_dim = g.head_dim;
  dc.ns.block_bytes = kv_block_payload_bytes(st);
  // Room for a long prompt's blocks at once (a 2048-token prompt is 128
  // blocks of 16), bounded to about 256 MiB of payloads waiting.
  dc.max_pending_writes = std::max<size_t>(64, (size_t(256) << 20) / size_t(dc.ns.block_bytes));
  dc.log = config.log_startup;
  dc.hooks = config.kv_offload_hooks_for_testing;
  auto tier = std::make_unique<DiskTier>(std::move(dc));
  if (config.log_startup && tier->enabled()) {
    const DiskTierStats s = tier->stats();
    fmt::print(
        stderr,
        "kv disk tier: {} (limit {:.1f} GiB): {} blocks found, {:.1f} MiB; {} KiB per block; "
        "finished requests' blocks {}\n",
        tier->ns_dir(), double(config.kv_offload_bytes) / double(1ull << 30), s.entries,
        double(s.bytes_on_disk) / (1 << 20), kv_block_payload_bytes(st) >> 10,
        config.kv_offload_finished ? "written" : "not written");
  }
  return tier;
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::create(Model& model, EngineConfig config) {
  if (config.max_num_seqs < 1) return Status::invalid_argument("--max-num-seqs must be >= 1");
  if (config.max_num_batched_tokens < 1) {
    return Status::invalid_argument("--max-num-batched-tokens must be >= 1");
  }
  if (config.max_wait_steps < 1) return Status::invalid_argument("max_wait_steps must be >= 1");
  if (config.long_prefill_token_threshold < 0) {
    return Status::invalid_argument("--long-prefill-token-threshold must be >= 0");
  }
  if (config.long_prefill_token_threshold == 0) {
    config.long_prefill_token_threshold = std::max(1, config.max_num_batched_tokens / 4);
  }
  if (config.max_num_partial_prefills < 1) {
    return Status::invalid_argument("--max-num-partial-prefills must be >= 1");
  }
  if (config.block_size < 1 || config.block_size > 1024) {
    return Status::invalid_argument("--block-size must be in [1, 1024], got {}", config.block_size);
  }
  const ModelConfig& mc = model.config();
  KvGeometry geometry = model.kv_geometry(config.block_size, config.kv_format);
  geometry.kv_residual_blocks = config.kv_residual_blocks;
  KvLayerGroups groups = kv_layer_groups(model, config);
  geometry.n_layers = groups.n_tensors();
  KvCacheLimits limits;
  limits.kv_cache_bytes = config.kv_cache_bytes;
  limits.max_num_seqs = config.max_num_seqs;
  limits.max_model_len = config.max_model_len;
  limits.n_ctx_train = mc.n_ctx_train;
  limits.allow_beyond_n_ctx_train = config.allow_long_max_model_len;
  limits.groups = groups.is_hybrid() ? &groups : nullptr;
  OMNIBUS_ASSIGN_OR_RETURN(const KvCachePlan plan, plan_kv_cache(geometry, limits));
  config.max_num_seqs = plan.max_num_seqs;
  const int64_t n_blocks = plan.n_blocks;
  const int64_t pool_tokens = n_blocks * config.block_size;
  const int32_t max_model_len = plan.max_model_len;
  model.set_max_context(max_model_len);
  if (config.log_startup && groups.is_hybrid()) {
    log_sliding_window_kv(groups, plan.geometry, mc.n_layer, n_blocks, max_model_len);
  }
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache,
                           KvCache::create(plan.geometry, n_blocks, config.enable_prefix_caching,
                                           std::move(groups)));
  EngineInfo info;
  info.n_blocks = int32_t(n_blocks);
  info.block_size = config.block_size;
  info.kv_cache_bytes = int64_t(cache->n_bytes());
  info.max_model_len = max_model_len;
  info.max_num_seqs = config.max_num_seqs;
  info.max_num_batched_tokens = config.max_num_batched_tokens;
  info.kv_layer_groups = cache->n_groups();
  info.kv_format = config.kv_format;
  info.n_vocab = mc.n_vocab;
  info.prefix_caching = config.enable_prefix_caching;
  info.scheduling_policy = config.scheduling_policy;
  if (config.log_startup) {
    // With sliding-window KV a block holds one layer group's K/V, not all layers'.
    const std::string blocks =
        info.kv_layer_groups > 1
            ? fmt::format("{} blocks of {} tokens x {} of {} layers", info.n_blocks,
                          info.block_size, plan.geometry.n_layers, mc.n_layer)
            : fmt::format("{} blocks of {} tokens = {} tokens", info.n_blocks, info.block_size,
                          pool_tokens);
    fmt::print(stderr,
               "kv cache: {}, {:.1f} MiB ({}; reserved, resident "
               "as used); max model len {}; "
               "max seqs {}; prefix caching {}, scheduling {}\n",
               blocks, double(info.kv_cache_bytes) / (1 << 20),
               kv_format_name(config.kv_format), max_model_len, info.max_num_seqs,
               info.prefix_caching ? "on" : "off", scheduling_policy_name(info.scheduling_policy));
  }
  std::unique_ptr<DiskTier> disk = make_disk_tier(config, *cache);
  auto impl = std::make_unique<Impl>(model, std::move(config), std::move(cache), std::move(disk));
  impl->local.kv_blocks_total = info.n_blocks;
  impl->stats = impl->local;
  return std::unique_ptr<Engine>(new Engine(std::move(impl), info));
}

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

StatusOr<std::shared_ptr<RequestStream>> Engine::submit(Request req) {
  const int32_t n_vocab = info_.n_vocab;
  if (req.prompt.empty()) return Status::invalid_argument("the prompt is empty");
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
  const int64_t total = int64_t(req.prompt.size()) + req.max_tokens;
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

void Engine::Impl::accept(std::unique_ptr<RequestState> r) {
  const uint64_t id = r->id;
  RequestState& state = *r;
  requests.emplace(id, std::move(r));
  if (state.req.kv_import != nullptr) {
    start_import(state);
  } else if (!start_disk_load(state)) {
    scheduler.add(state.seqs[0].get());
  }
}

// The disk tier's read path. The prompt's blocks after the pool's prefix hit
// that are on disk are read on the tier's I/O thread into blocks reserved by
// a holding sequence; the request waits outside the scheduler (others keep
// running) until end_disk_load. False, changing nothing, when there is no
// such block or the pool cannot spare the blocks: the request is scheduled
// at once and computes what it lacks.
bool Engine::Impl::start_disk_load(RequestState& r) {
  Sequence& seq = *r.seqs[0];
  if (disk == nullptr || !disk->enabled() || !seq.may_use_cached_prefix) return false;
  const int32_t bs = config.block_size;
  // The last prompt token is always computed (its logits are sampled).
  const int32_t max_blocks = (seq.num_tokens() - 1) / bs;
  if (max_blocks <= 0) return false;
  PrefixMatch match;
  kv.match_prefix(seq.tokens(), max_blocks, seq.block_keys, match);
  const int32_t n_local = match.n_blocks();
  if (n_local == max_blocks) return false;
  kv.extend_keys(seq.tokens(), max_blocks, seq.block_keys);
  const std::span<const uint64_t> keys(seq.block_keys.data(), size_t(max_blocks));
  const int32_t n_disk = disk->lookup(keys.subspan(size_t(n_local)));
  if (n_disk == 0) return false;
  std::vector<BlockCopy> copies;
  const int32_t hold =
      kv.allocate_new(match, n_disk * bs, /*keep_free=*/kv.n_blocks() / 100, copies);
  if (hold < 0) return false;
  OMNIBUS_CHECK(copies.empty());  // a match ends on a full block: nothing is shared and open
  spill_evicted();                // before the scatter overwrites what the hold took
  std::vector<DiskLoadItem> items(static_cast<size_t>(n_disk));
  for (int32_t i = 0; i < n_disk; ++i) {
    const int32_t b = n_local + i;
    DiskLoadItem& it = items[size_t(i)];
    it.key = keys[size_t(b)];
    it.parent = parent_key(keys, b);
    it.tokens = block_tokens(seq, b, bs);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ++disk_loads_in_flight;
  }
  const uint64_t id = r.id;
  // on_done runs on the tier's I/O thread: hand the id over and wake the
  // engine (notified under the lock: see start_import).
  std::shared_ptr<const DiskLoad> load = disk->request_load(std::move(items), [this, id] {
    std::lock_guard<std::mutex> lock(mu);
    disk_loads_done.push_back(id);
    --disk_loads_in_flight;
    cv.notify_all();
  });
  disk_loading[id] = DiskLoadState{hold, n_local, n_disk, std::move(load)};
  r.disk_loading = true;
  ++local.kv_disk_loads;
  return true;
}

// The load of request `id` is done: the blocks read join the prefix cache (as
// if computed here), the hold lets go of them (they wait at the free list's
// most recently used end), and the request is scheduled; its admission finds
// them. Blocks that did not load are computed.
void Engine::Impl::end_disk_load(uint64_t id) {
  auto it = disk_loading.find(id);
  OMNIBUS_CHECK(it != disk_loading.end());
  const DiskLoadState st = std::move(it->second);
  disk_loading.erase(it);
  RequestState& r = *requests.at(id);
  Sequence& seq = *r.seqs[0];
  r.disk_loading = false;
  OMNIBUS_CHECK(st.load->done());
  const int32_t n = std::min(st.load->n_loaded(), st.n_disk);
  const std::span<const int32_t> table = kv.block_table(st.hold);
  for (int32_t i = 0; i < n; ++i) {
    scatter_kv_block(kv.storage(), table[size_t(st.n_local + i)], st.load->payload(i));
  }
  if (n > 0) kv.commit(st.hold, seq.tokens(), (st.n_local + n) * config.block_size, seq.block_keys);
  local.kv_disk_hit_blocks += uint64_t(n);
  local.kv_disk_hit_tokens += uint64_t(n) * uint64_t(config.block_size);
  kv.free(st.hold);
  scheduler.add(&seq);
  if (r.abort_after_import) abort_request(id);
}

// Queues the full blocks of `seq` (its K/V written) that the disk tier does
// not hold yet: a memcpy each on this thread, the write on the tier's.
void Engine::Impl::store_finished(Sequence& seq) {
  if (disk == nullptr || !config.kv_offload_finished || seq.kv_seq < 0 || !kv.prefix_caching())
    return;
  const int32_t bs = config.block_size;
  const int32_t n_full = std::min(kv.n_tokens(seq.kv_seq), seq.num_computed_tokens) / bs;
  if (n_full <= 0) return;
  std::vector<uint64_t>& keys = seq.block_keys;
  kv.extend_keys(seq.tokens(), n_full, keys);
  const std::span<const int32_t> table = kv.block_table(seq.kv_seq);
  for (int32_t i = 0; i < n_full; ++i) {
    const uint64_t key = keys[size_t(i)];
    if (disk->contains(key)) continue;
    DiskBlock b{key, parent_key(keys, i), block_tokens(seq, i, bs), {}};
    if (store_block(std::move(b), table[size_t(i)])) ++local.kv_disk_stored_finished;
  }
}

// Writes the blocks the pool just took back out of the prefix cache (still
// holding their K/V: nothing has written into them yet) to the disk tier,
// unless it holds them already.
void Engine::Impl::spill_evicted() {
  if (evicted.empty()) return;
  for (PrefixCache::Evicted& e : evicted) {
    if (disk->contains(e.key)) continue;
    DiskBlock b{e.key, e.parent_key, std::move(e.tokens), {}};
    if (store_block(std::move(b), e.block)) ++local.kv_disk_stored_evicted;
  }
  evicted.clear();
}

// Gathers pool block `block`'s K/V into b's payload and queues b for the
// disk tier's writer; false when the tier did not take it.
bool Engine::Impl::store_block(DiskBlock b, int32_t block) {
  b.payload.resize(kv_block_payload_bytes(kv.storage()));
  gather_kv_block(kv.storage(), block, b.payload);
  return disk->store(std::move(b));
}

// Matches the prompt's importable blocks against the prefix cache and fetches
// the rest into blocks reserved by a holding sequence; the request waits
// outside the scheduler until end_import. When nothing needs fetching, or the
// pool cannot spare the blocks, it is scheduled at once (computing what it
// lacks itself).
void Engine::Impl::start_import(RequestState& r) {
  Sequence& seq = *r.seqs[0];
  KvImport& im = *r.req.kv_import;
  ++local.kv_imports;
  // The last prompt token is always computed here (its logits are sampled).
  const int32_t n_want = std::min(im.n_blocks, (seq.num_prompt_tokens() - 1) / config.block_size);
  PrefixMatch match;
  if (kv.prefix_caching()) kv.match_prefix(seq.tokens(), n_want, seq.block_keys, match);
  // kivi2 with a window: the fetched blocks need their fp16 window rows too
  // (else admission cuts the hit back), staged in a transfer slot; the
  // source exported those of its last W blocks (pin_prompt). With them, any
  // cached run is usable as it is: only the rows where the hit ends matter,
  // and those come along. A run that reaches n_want but lacks them needs
  // the rows alone (refetched blocks would only duplicate cached ones).
  const int32_t w = kv.storage().geometry().residual_blocks();
  int32_t transfer_slot = -1;
  bool rows_only = false;
  if (w > 0 && match.n_blocks() < n_want && n_want == im.n_blocks && n_want >= w) {
    transfer_slot = kv.storage().claim_transfer_slot();
    PrefixMatch raw;
    if (transfer_slot >= 0)
      kv.match_prefix(seq.tokens(), n_want, seq.block_keys, raw, /*need_window=*/false);
    if (raw.n_blocks() > match.n_blocks()) match = std::move(raw);
    rows_only = transfer_slot >= 0 && match.n_blocks() == n_want;
  }
  const int32_t n_local = match.n_blocks();
  const bool short_of_rows = n_local < n_want || rows_only;
  int32_t hold = -1;
  if (short_of_rows && kv.prefix_caching() && (w == 0 || transfer_slot >= 0)) {
    std::vector<BlockCopy> copies;
    hold = kv.allocate_new(match, (n_want - n_local) * config.block_size, /*keep_free=*/0, copies);
    OMNIBUS_CHECK(copies.empty());  // a match ends on a full block: nothing is shared and open
  }
  if (hold < 0) {
    if (transfer_slot >= 0) kv.storage().release_transfer_slot(transfer_slot);
    local.kv_import_blocks_local += uint64_t(n_local);
    if (short_of_rows) ++local.kv_import_fallbacks;
    im.finished(n_local, 0, short_of_rows);
    scheduler.add(&seq);
    return;
  }
  spill_evicted();  // before the fetch overwrites what the hold took
  const std::span<const int32_t> table = kv.block_table(hold);
  std::vector<int32_t> dst(table.begin() + n_local, table.end());
  importing[r.id] = ImportState{hold, n_local, n_want, transfer_slot};
  r.importing = true;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++imports_in_flight;
  }
  const uint64_t id = r.id;
  const int64_t window_dst =
      transfer_slot >= 0 ? int64_t(kv.storage().transfer_slot_offset(transfer_slot)) : -1;
  im.fetch(n_local, std::move(dst), window_dst, [this, id](bool ok) {
    // Notified under the lock: once the engine sees the count drop it may be
    // destroyed, so nothing here may touch it after the unlock.
    std::lock_guard<std::mutex> lock(mu);
    imports_done.emplace_back(id, ok);
    --imports_in_flight;
    cv.notify_all();
  });
}

// The fetch of request `id` ended: on success its blocks join the prefix
// cache (as if computed here), then the request is scheduled; its admission
// finds them. The holding sequence lets go first: the blocks wait in the free
// list's most recently freed end, which allocation reaches last.
void Engine::Impl::end_import(uint64_t id, bool ok) {
  auto it = importing.find(id);
  OMNIBUS_CHECK(it != importing.end());
  const ImportState im = it->second;
  importing.erase(it);
  RequestState& r = *requests.at(id);
  Sequence& seq = *r.seqs[0];
  r.importing = false;
  const int32_t n_fetched = im.n_blocks - im.n_local;
  if (ok && im.transfer_slot >= 0) {
    // The window rows landed in the transfer slot: give them to the last W
    // blocks before they join the prefix cache, so admission's match_prefix
    // (usable_prefix) takes all n_blocks. Nothing claims residual slots
    // between here and the request's admission but other imports' rows and
    // steps' kv_store calls, exactly as for a local prefix-cache hit.
    const std::span<const int32_t> table = kv.block_table(im.hold);
    const int32_t w = kv.storage().geometry().residual_blocks();
    ok = kv.storage().import_window_rows(table.subspan(size_t(im.n_blocks - w), size_t(w)),
                                         im.transfer_slot);
  }
  if (im.transfer_slot >= 0) kv.storage().release_transfer_slot(im.transfer_slot);
  if (ok) {
    kv.commit(im.hold, seq.tokens(), im.n_blocks * config.block_size, seq.block_keys);
    seq.num_imported_tokens = n_fetched * config.block_size;
    local.kv_import_blocks_fetched += uint64_t(n_fetched);
  } else {
    ++local.kv_import_fallbacks;
  }
  local.kv_import_blocks_local += uint64_t(im.n_local);
  kv.free(im.hold);
  r.req.kv_import->finished(im.n_local, ok ? n_fetched : 0, !ok);
  scheduler.add(&seq);
  if (r.abort_after_import) abort_request(id);
}

// Keeps the prompt's full blocks but the one holding its last token (a
// decode worker computes that one itself) in a sequence of their own.
void Engine::Impl::pin_prompt(RequestState& r, Sequence& seq0) {
  if (seq0.kv_seq < 0) return;
  const int32_t n = std::min((seq0.num_prompt_tokens() - 1) / config.block_size,
                             kv.n_tokens(seq0.kv_seq) / config.block_size);
  auto pinned = std::make_shared<KvPinned>();
  pinned->pin_id = next_pin_id++;
  const std::span<const int32_t> table = kv.block_table(seq0.kv_seq);
  pinned->blocks.assign(table.begin(), table.begin() + n);
  std::vector<uint64_t> keys;
  uint64_t parent = PrefixCache::kRootKey;
  const std::vector<int32_t>& prompt = r.req.prompt;
  for (int32_t i = 0; i < n; ++i) {
    parent = PrefixCache::chain_key(
        std::span<const int32_t>(prompt.data() + size_t(i) * size_t(config.block_size),
                                 size_t(config.block_size)),
        parent);
    pinned->keys.push_back(parent);
  }
  Pin pin{-1, n, -1};
  if (!export_window(pinned->blocks, pin.transfer_slot)) {
    pin.n_blocks = 0;  // the decode worker computes the prompt itself
    pinned->blocks.clear();
    pinned->keys.clear();
  }
  if (pin.transfer_slot >= 0) {
    pinned->window_offset = int64_t(kv.storage().transfer_slot_offset(pin.transfer_slot));
    pinned->window_bytes = kv.storage().transfer_slot_bytes();
  }
  pin.seq = kv.share_prefix(seq0.kv_seq, pin.n_blocks);
  pins[pinned->pin_id] = pin;
  r.pinned = std::move(pinned);
}

// kivi2 with a window of W blocks: exports the fp16 window rows of the last W
// of `blocks` into a transfer slot claimed into `slot`. True when there is
// nothing to export (no window, no blocks); false, with no slot held, when
// there are fewer than W blocks, no slot is free or some layer lost the rows
// (then the blocks are worth nothing to a decode worker: it could not start
// after them).
bool Engine::Impl::export_window(std::span<const int32_t> blocks, int32_t& slot) {
  slot = -1;
  KvStorage& st = kv.storage();
  const int32_t w = st.geometry().residual_blocks();
  if (w == 0 || blocks.empty()) return true;
  if (int32_t(blocks.size()) < w) return false;
  slot = st.claim_transfer_slot();
  if (slot < 0) return false;
  if (st.export_window_rows(blocks.subspan(blocks.size() - size_t(w)), slot)) return true;
  st.release_transfer_slot(slot);
  slot = -1;
  return false;
}

void Engine::Impl::unpin(uint64_t pin_id) {
  auto it = pins.find(pin_id);
  if (it == pins.end()) return;
  kv.free(it->second.seq);
  if (it->second.transfer_slot >= 0) kv.storage().release_transfer_slot(it->second.transfer_slot);
  pins.erase(it);
}

void Engine::Impl::finish(Sequence& seq, FinishReason reason, EngineEvent& event) {
  RequestState& r = *seq.request;
  if (r.req.pin_prompt_blocks && seq.index == 0 && reason != FinishReason::kAbort)
    pin_prompt(r, seq);
  store_finished(seq);
  scheduler.finish(&seq);
  event.finish = reason;
  if (++r.n_finished == r.req.n) {
    event.final = true;
    event.pinned = r.pinned;
    done_requests.push_back(r.id);
    ++local.n_requests_finished;
  }
}

void Engine::Impl::abort_request(uint64_t id) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  RequestState& r = *it->second;
  if (r.importing || r.disk_loading) {  // its blocks are being written: abort when that has ended
    r.abort_after_import = true;
    return;
  }
  const Clock::time_point now = Clock::now();
  for (auto& seq : r.seqs) {
    if (seq->status == SeqStatus::kFinished) continue;
    EngineEvent e;
    e.seq_index = seq->index;
    e.n_prompt_tokens = seq->num_prompt_tokens();
    e.n_cached_tokens = std::max(0, seq->num_cached_tokens - seq->num_imported_tokens);
    e.n_output_tokens = int32_t(seq->output.size());
    e.time = now;
    e.first_scheduled = seq->first_scheduled;
    finish(*seq, FinishReason::kAbort, e);
    r.stream->push(std::move(e));
  }
  for (uint64_t done : done_requests) requests.erase(done);
  done_requests.clear();
}

void Engine::Impl::abort_all() {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests) ids.push_back(id);
  for (uint64_t id : ids) abort_request(id);
}

void Engine::Impl::fork(RequestState& r) {
  Sequence& parent = *r.seqs[0];
  for (size_t i = 1; i < r.seqs.size(); ++i) {
    Sequence& child = *r.seqs[i];
    child.kv_seq = kv.fork(parent.kv_seq);
    child.num_computed_tokens = parent.num_computed_tokens;
    child.num_cached_tokens = parent.num_cached_tokens;
    scheduler.add_running(&child);
  }
  r.forked = true;
}

// Samples every job's token (in parallel over the model's pool: each job
// touches only its own sequence's sampler and a per-thread scratch row), then
// applies them in job order on this thread. The result is the same as
// sampling the jobs one after another.
void Engine::Impl::sample_all(std::vector<SampleJob>& jobs, Clock::time_point now) {
  if (config.on_logits) {
    for (const SampleJob& j : jobs) {
      config.on_logits(j.seq->request->id, j.seq->index, j.seq->num_tokens() - 1,
                       std::span<const float>(j.row, size_t(n_vocab)));
    }
  }
  ThreadPool* pool = model.thread_pool();
  if (pool != nullptr && jobs.size() > 1) {
    pool->parallel_for(int64_t(jobs.size()), [&](int64_t i, int thread) {
      SampleJob& j = jobs[size_t(i)];
      j.token = draw(*j.seq, j.row, scratch[size_t(thread)].data(), j.mask_seconds);
    });
  } else {
    for (SampleJob& j : jobs) j.token = draw(*j.seq, j.row, scratch[0].data(), j.mask_seconds);
  }
  for (SampleJob& j : jobs) {
    if (j.mask_seconds >= 0) {
      const auto& bounds = EngineStats::kMaskBounds;
      const size_t b =
          size_t(std::lower_bound(bounds.begin(), bounds.end(), j.mask_seconds) - bounds.begin());
      ++local.structured_mask_buckets[b];
      ++local.structured_masks;
      local.structured_mask_seconds += j.mask_seconds;
    }
    emit(*j.seq, std::move(j.token), now);
  }
}

// The sampler's pick for seq from its logits row (min_tokens and grammar
// masking applied to a copy in scratch_row, [n_vocab]). Touches only seq's
// sampler and mask.
SampledToken Engine::Impl::draw(Sequence& seq, const float* row, float* scratch_row,
                                double& mask_seconds) {
  const Request& req = seq.request->req;
  std::copy(row, row + n_vocab, scratch_row);
  if (int32_t(seq.output.size()) < req.min_tokens) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if (!req.ignore_eos) {
      for (int32_t id : config.eog_ids) {
        if (id >= 0 && id < n_vocab) scratch_row[size_t(id)] = kNegInf;
      }
    }
    for (int32_t id : req.stop_token_ids) scratch_row[size_t(id)] = kNegInf;
  }
  if (seq.matcher) {
    // Before every sampling stage: what the grammar forbids does not exist.
    const Clock::time_point t0 = Clock::now();
    std::shared_ptr<const grammar::TokenBitmask> mask =
        seq.next_mask ? GrammarMasks::get(*seq.next_mask) : req.grammar->allowed(*seq.matcher);
    // A mask that allows nothing (a grammar the vocabulary cannot continue)
    // is not applied: emit() then finds the token rejected and ends the sequence.
    const bool any = std::any_of(mask->begin(), mask->end(), [](uint64_t w) { return w != 0; });
    if (any) grammar::TokenMasker::apply(*mask, scratch_row, n_vocab);
    mask_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return seq.sampler->sample(scratch_row, *seq.prompt, seq.output);
}

// Appends t to seq's output, pushes its event and applies the stop conditions.
void Engine::Impl::emit(Sequence& seq, SampledToken t, Clock::time_point now) {
  RequestState& r = *seq.request;
  const Request& req = r.req;
  seq.output.push_back(t.id);
  ++local.n_tokens_generated;

  EngineEvent e;
  e.seq_index = seq.index;
  e.token = t.id;
  e.logprob = t.logprob;
  e.top_logprobs = std::move(t.top_logprobs);
  e.n_prompt_tokens = seq.num_prompt_tokens();
  e.n_cached_tokens = std::max(0, seq.num_cached_tokens - seq.num_imported_tokens);
  e.n_output_tokens = int32_t(seq.output.size());
  e.time = now;
  e.first_scheduled = seq.first_scheduled;
  if (seq.index == 0 && seq.output.size() == 1 && req.prompt_logprobs >= 0) {
    e.prompt_logprobs = std::move(r.prompt_logprobs);
  }
  const bool stop_token = std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), t.id) !=
                          req.stop_token_ids.end();
  // Constrained: an end token means the grammar ended (it is only allowed
  // where it may), whatever ignore_eos says; a token the grammar rejects
  // (only when it allowed none) ends the sequence without being printed.
  bool grammar_end = false;
  if (seq.matcher) {
    seq.next_mask.reset();
    if (is_eog[size_t(t.id)]) {
      grammar_end = true;
    } else if (!req.grammar->accept_token(*seq.matcher, t.id)) {
      grammar_end = true;
      ++local.structured_rejections;
    }
  }
  if ((!req.ignore_eos && is_eog[size_t(t.id)]) || stop_token || grammar_end) {
    finish(seq, FinishReason::kStop, e);
  } else if (int32_t(seq.output.size()) >= req.max_tokens) {
    finish(seq, FinishReason::kLength, e);
  } else if (seq.matcher) {
    seq.next_mask = masks.submit(req.grammar, *seq.matcher);  // computed during the next forward
  }
  r.stream->push(std::move(e));
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
    step_seq.all_logits = r.req.prompt_logprobs >= 0 && seq.index == 0 &&
                          int32_t(r.prompt_logprobs.size()) < seq.num_prompt_tokens() - 1 &&
                          first + ss.n_tokens > int32_t(r.prompt_logprobs.size());
    batch.seqs.push_back(step_seq);
  }
  const std::span<const float> logits = model.forward(batch, kv.storage());
  OMNIBUS_CHECK(int64_t(logits.size()) == batch.n_logit_rows() * n_vocab);
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
