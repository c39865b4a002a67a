// Engine::create: checks the configuration, lays out and sizes the KV pool
// (sliding-window layer groups, plan_kv_cache), makes the disk tier the
// config asks for, logs the start-up lines and builds the Impl.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/draft_model.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "engine/scheduler_policy.h"
#include "kv/disk_tier.h"
#include "kv/kv_block_io.h"
#include "kv/kv_cache.h"
#include "kv/kv_cache_size.h"
#include "kv/kv_format.h"
#include "kv/kv_layer_groups.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "util/status.h"

namespace omnibus {

namespace {

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

// Checks the speculative settings and turns speculation off, with a log
// line, where it cannot run: encoders (nothing to decode).
Status resolve_speculation(const Model& model, EngineConfig& config) {
  SpeculativeConfig& sc = config.speculative;
  if (sc.kind == SpeculativeKind::kNone) return Status::ok();
  OMNIBUS_RETURN_IF_ERROR(validate(sc));
  if (sc.kind == SpeculativeKind::kDraft) {
    if (config.draft_model == nullptr) {
      return Status::invalid_argument("--speculative draft needs a draft model (--draft-model)");
    }
    if (config.draft_model->is_encoder()) {
      return Status::invalid_argument("the draft model is an encoder: it cannot guess tokens");
    }
    if (config.draft_kv_cache_bytes < 0) {
      return Status::invalid_argument("--draft-kv-cache-memory must be >= 0");
    }
  }
  const char* why = model.is_encoder() ? "an encoder generates nothing" : nullptr;
  if (why != nullptr) {
    if (config.log_startup) fmt::print(stderr, "speculative decoding: off ({})\n", why);
    sc.kind = SpeculativeKind::kNone;
  } else if (config.log_startup) {
    fmt::print(stderr,
               "speculative decoding: {} (up to {} tokens, {}; while a step's decodes "
               "and drafts fit {} tokens)\n",
               speculative_kind_name(sc.kind), sc.num_speculative_tokens,
               sc.kind == SpeculativeKind::kDraft
                   ? fmt::format("draft model {}, {} layers", config.draft_model->config().name,
                                 config.draft_model->config().n_layer)
                   : fmt::format("n-grams {}..{}", sc.ngram_min, sc.ngram_max),
               sc.max_step_tokens);
  }
  return Status::ok();
}

// The draft model's own KV pool (the target's format, f16 for q4 / kivi2: its
// guesses roll back anywhere; --draft-kv-cache-memory, else as many tokens as
// the target's pool of target_blocks) and proposer.
StatusOr<std::unique_ptr<DraftModel>> make_draft_model(const EngineConfig& config,
                                                       int64_t target_blocks, int32_t max_model_len,
                                                       int32_t target_n_vocab) {
  Model& dm = *config.draft_model;
  const KvFormat format = kv_has_residual(config.kv_format) ? KvFormat::kF16 : config.kv_format;
  const KvGeometry g = dm.kv_geometry(config.block_size, format);
  const int64_t per_block = int64_t(g.bytes_per_block());
  const int64_t n_blocks =
      config.draft_kv_cache_bytes > 0 ? config.draft_kv_cache_bytes / per_block : target_blocks;
  const int64_t seq_blocks = (int64_t(max_model_len) + config.block_size - 1) / config.block_size;
  if (n_blocks < 1) {
    return Status::invalid_argument(
        "--draft-kv-cache-memory {} holds no KV block of the draft model ({} bytes each)",
        config.draft_kv_cache_bytes, per_block);
  }
  dm.set_max_context(max_model_len);
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv,
                           KvCache::create(g, n_blocks, /*enable_prefix_caching=*/false));
  if (config.log_startup) {
    fmt::print(
        stderr, "draft kv cache: {} blocks of {} tokens = {} tokens, {:.1f} MiB ({}){}\n", n_blocks,
        config.block_size, n_blocks * config.block_size, double(kv->n_bytes()) / (1 << 20),
        kv_format_name(format),
        n_blocks < seq_blocks ? "; shorter than max model len: long sequences go undrafted" : "");
  }
  return std::make_unique<DraftModel>(dm, std::move(kv), config.max_num_batched_tokens,
                                      target_n_vocab);
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
  if (!(config.max_itl_ms >= 0)) {
    return Status::invalid_argument("max_itl_ms must be >= 0, got {}", config.max_itl_ms);
  }
  if (config.max_num_partial_prefills < 1) {
    return Status::invalid_argument("--max-num-partial-prefills must be >= 1");
  }
  if (config.block_size < 1 || config.block_size > 1024) {
    return Status::invalid_argument("--block-size must be in [1, 1024], got {}", config.block_size);
  }
  OMNIBUS_RETURN_IF_ERROR(resolve_speculation(model, config));
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
  if (model.pools_whole_prompts()) {
    // Bidirectional attention: a prompt is computed whole, in one step, and
    // nothing of it can be reused by another (no prefix caching). Pooling
    // none, mean or cls on a decoder likewise: every token's row must come
    // from one step.
    config.enable_prefix_caching = false;
    config.max_num_batched_tokens = std::max(config.max_num_batched_tokens, max_model_len);
  }
  if (config.log_startup && groups.is_hybrid()) {
    log_sliding_window_kv(groups, plan.geometry, mc.n_layer, n_blocks, max_model_len);
  }
  OMNIBUS_ASSIGN_OR_RETURN(
      std::unique_ptr<KvCache> cache,
      KvCache::create(plan.geometry, n_blocks, config.enable_prefix_caching, std::move(groups)));
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
  info.encoder = model.is_encoder();
  info.pooling = model.pooling();
  info.can_pool = model.supports_pooling(model.pooling());
  info.n_embd = model.pooled_dim();
  info.speculative = config.speculative.kind;
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
               blocks, double(info.kv_cache_bytes) / (1 << 20), kv_format_name(config.kv_format),
               max_model_len, info.max_num_seqs, info.prefix_caching ? "on" : "off",
               scheduling_policy_name(info.scheduling_policy));
  }
  std::unique_ptr<DiskTier> disk = make_disk_tier(config, *cache);
  if (config.max_pinned_fraction > 0) {
    config.max_pinned_blocks = int32_t(config.max_pinned_fraction * double(info.n_blocks));
  }
  std::unique_ptr<DraftModel> draft;
  if (config.speculative.kind == SpeculativeKind::kDraft) {
    OMNIBUS_ASSIGN_OR_RETURN(draft, make_draft_model(config, n_blocks, max_model_len, mc.n_vocab));
  }
  auto impl = std::make_unique<Impl>(model, std::move(config), std::move(cache), std::move(disk));
  impl->draft = std::move(draft);
  impl->local.kv_blocks_total = info.n_blocks;
  impl->stats = impl->local;
  return std::unique_ptr<Engine>(new Engine(std::move(impl), info));
}

}  // namespace omnibus
