#include "cli/engine_flags.h"

#include "engine/scheduler_policy.h"
#include "gguf/gguf_fingerprint.h"
#include "kv/kv_cache_size.h"
#include "kv/kv_format.h"

namespace omnibus {
namespace {

// The KV format's two fields of EngineConfig (kept apart: their types and
// names follow kv/).
Status set_kv_format(const EngineFlags& f, EngineConfig& cfg) {
  OMNIBUS_ASSIGN_OR_RETURN(cfg.kv_format, parse_kv_format(f.kv_dtype));
  cfg.kv_residual_blocks = f.kv_residual_blocks;
  cfg.sliding_window_kv = !f.no_sliding_window_kv;
  return Status::ok();
}

}  // namespace

void add_model_flags(CLI::App& cmd, ModelFlags& f) {
  cmd.add_option("-m,--model", f.model, "GGUF path or bundled model name")->capture_default_str();
  cmd.add_option("-t,--threads", f.threads, "Compute threads (0 = all cores)")
      ->capture_default_str();
}

void add_task_flags(CLI::App& cmd, ModelFlags& f) {
  cmd.add_option("--task", f.task,
                 "auto, generate, embed, or score / rerank (embed with rank pooling; auto: embed "
                 "when the GGUF pools or is an encoder)")
      ->capture_default_str();
  cmd.add_option("--pooling", f.pooling,
                 "Embeddings: mean, cls, last, none (every token's vector) or rank (a "
                 "reranker's scores); default: the GGUF's pooling_type, decoders last. On a "
                 "decoder, mean, cls and none run prompts whole, without prefix caching");
}

void add_kv_format_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--kv-cache-dtype", f.kv_dtype, "KV cache element type: f16, f32, q8, q4, kivi2")
      ->capture_default_str();
  cmd.add_option("--kv-residual-blocks", f.kv_residual_blocks,
                 "q4/kivi2: completed KV blocks a query still reads in fp16 besides its open one "
                 "(KIVI's residual window; -1 = the format's default: kivi2 1, q4 0)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 64));
  cmd.add_flag("--no-sliding-window-kv", f.no_sliding_window_kv,
               "Keep every token's K/V in the sliding-window layers too (Gemma 3), as without "
               "sliding-window KV; by default those layers free the blocks that left every window");
}

void add_speculative_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--speculative", f.speculative,
                 "Speculative decoding: none, or ngram (prompt lookup: guess that what followed "
                 "the last tokens earlier in the prompt or output follows again; verified in the "
                 "same step, outputs unchanged), or draft (a small model with the same "
                 "vocabulary guesses greedily, --draft-model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "ngram", "draft"}));
  cmd.add_option("--draft-model", f.draft_model,
                 "draft: GGUF path or bundled name of the draft model (same vocabulary as the "
                 "model, checked at start; implies --speculative draft). Its forwards run on the "
                 "same threads, batched across the sequences that draft");
  cmd.add_option("--draft-kv-cache-memory", f.draft_kv_cache_memory,
                 "draft: size of the draft model's own KV pool, e.g. 512MiB (default: as many "
                 "tokens as the model's pool)");
  cmd.add_option("--num-speculative-tokens", f.num_speculative_tokens,
                 "Speculative decoding: most tokens a sequence guesses per step (fewer while its "
                 "guesses are rejected)")
      ->capture_default_str()
      ->check(CLI::Range(1, int(kMaxSpeculativeTokens)));
  cmd.add_option("--spec-ngram-min", f.spec_ngram_min,
                 "ngram: shortest run of last tokens looked up")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_option("--spec-ngram-max", f.spec_ngram_max,
                 "ngram: longest run of last tokens looked up")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_flag("--no-spec-backoff", f.no_spec_backoff,
               "Speculative decoding: verify as many guessed tokens as the acceptance rate asks "
               "for whatever an extra token costs (vLLM's and llama.cpp's behaviour); by default "
               "a guessed position is verified only while it pays for itself in the measured step "
               "times");
  cmd.add_option("--spec-max-step-tokens", f.spec_max_step_tokens,
                 "Speculative decoding backs off as the batch fills: a step carries guesses only "
                 "while its decoding sequences plus their guesses stay within this many tokens "
                 "(0 = never)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 16));
}

void add_engine_flags(CLI::App& cmd, EngineFlags& f) {
  add_speculative_flags(cmd, f);
  cmd.add_option("--max-num-seqs", f.max_num_seqs, "Most sequences in one engine step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "Token budget of one engine step (prompt chunks + decodes)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--long-prefill-token-threshold", f.long_prefill_token_threshold,
                 "A prompt with more tokens left than this is long: it is guaranteed this many "
                 "tokens a step and gets the budget nobody else wants, so short prompts never wait "
                 "behind it (0 = a quarter of --max-num-batched-tokens)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd.add_option("--max-num-partial-prefills", f.max_num_partial_prefills,
                 "Most long prompts partially prefilled at once; further long prompts wait, "
                 "shorter ones behind them do not")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-itl-ms", f.max_itl_ms,
                 "Steady pace: while sequences decode, a step carries prompt chunks only up to "
                 "what keeps it within this many milliseconds (judged from measured step times; "
                 "prompts still get at least one token a step). 0 = off: every "
                 "step may take the whole --max-num-batched-tokens")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd.add_option("--block-size", f.block_size, "KV cache block size in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd.add_option(
      "--kv-cache-memory", f.kv_cache_memory,
      "KV cache pool size, e.g. 2GiB, 512MiB or bytes (default: from the available memory)");
  cmd.add_option("--max-model-len", f.max_model_len,
                 "Longest prompt + completion in tokens (0 = the model's, capped to the pool)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 24));
  add_kv_format_flags(cmd, f);
  cmd.add_flag("--no-prefix-caching", f.no_prefix_caching,
               "Do not reuse the KV blocks of prompt prefixes computed before");
  cmd.add_option(
         "--scheduling-policy", f.scheduling_policy,
         "Waiting-queue order: cache-aware (longest cached prefix first, with aging) or fcfs")
      ->capture_default_str();
  cmd.add_option(
      "--kv-offload-dir", f.kv_offload_dir,
      "Disk tier of the prefix cache: full KV blocks are written to this directory (one "
      "checksummed file per block, per model and KV format) and a prompt prefix found there is "
      "loaded instead of recomputed, also after a restart (off when absent; not for q4/kivi2)");
  cmd.add_option("--kv-offload-size", f.kv_offload_size,
                 "Most bytes the disk tier keeps for this model and KV format, e.g. 8GiB, 512MiB; "
                 "the least "
                 "recently used blocks are deleted beyond it")
      ->capture_default_str();
  cmd.add_flag(
      "--no-kv-offload-finished", f.no_kv_offload_finished,
      "Disk tier: write only the blocks the pool evicts, not also the full blocks of every "
      "finished request (then little survives a restart after a short run)");
}

void set_model_identity(const LoadedModel& m, EngineConfig& cfg) {
  cfg.eog_ids = m.tokenizer->eog_ids();
  if (!cfg.kv_offload_dir.empty() && m.file != nullptr)
    cfg.model_fingerprint = gguf_fingerprint(*m.file);
}

StatusOr<EngineConfig> to_engine_config(const EngineFlags& f) {
  EngineConfig cfg;
  cfg.max_num_seqs = f.max_num_seqs;
  cfg.max_num_batched_tokens = f.max_num_batched_tokens;
  cfg.long_prefill_token_threshold = f.long_prefill_token_threshold;
  cfg.max_num_partial_prefills = f.max_num_partial_prefills;
  cfg.max_itl_ms = f.max_itl_ms;
  cfg.block_size = f.block_size;
  cfg.max_model_len = f.max_model_len;
  OMNIBUS_RETURN_IF_ERROR(set_kv_format(f, cfg));
  cfg.enable_prefix_caching = !f.no_prefix_caching;
  OMNIBUS_ASSIGN_OR_RETURN(cfg.scheduling_policy, parse_scheduling_policy(f.scheduling_policy));
  if (!f.kv_cache_memory.empty()) {
    OMNIBUS_ASSIGN_OR_RETURN(cfg.kv_cache_bytes, parse_byte_size(f.kv_cache_memory));
  }
  cfg.kv_offload_dir = f.kv_offload_dir;
  cfg.kv_offload_finished = !f.no_kv_offload_finished;
  StatusOr<int64_t> offload = parse_byte_size(f.kv_offload_size);
  if (!offload.is_ok() || *offload <= 0) {
    return Status::invalid_argument("--kv-offload-size: expected a size such as 8GiB, got '{}'",
                                    f.kv_offload_size);
  }
  cfg.kv_offload_bytes = uint64_t(*offload);
  OMNIBUS_ASSIGN_OR_RETURN(cfg.speculative.kind, parse_speculative_kind(f.speculative));
  cfg.speculative.num_speculative_tokens = f.num_speculative_tokens;
  cfg.speculative.ngram_min = f.spec_ngram_min;
  cfg.speculative.ngram_max = f.spec_ngram_max;
  cfg.speculative.max_step_tokens = f.spec_max_step_tokens;  // Engine::create validates them
  cfg.speculative.backoff = !f.no_spec_backoff;
  if (!f.draft_model.empty()) {
    if (cfg.speculative.kind == SpeculativeKind::kNgram) {
      return Status::invalid_argument("--draft-model goes with --speculative draft, not ngram");
    }
    cfg.speculative.kind = SpeculativeKind::kDraft;
  } else if (cfg.speculative.kind == SpeculativeKind::kDraft) {
    return Status::invalid_argument("--speculative draft needs --draft-model PATH");
  }
  if (!f.draft_kv_cache_memory.empty()) {
    StatusOr<int64_t> bytes = parse_byte_size(f.draft_kv_cache_memory);
    if (!bytes.is_ok() || *bytes <= 0) {
      return Status::invalid_argument(
          "--draft-kv-cache-memory: expected a size such as 512MiB, got '{}'",
          f.draft_kv_cache_memory);
    }
    cfg.draft_kv_cache_bytes = *bytes;
  }
  return cfg;
}

}  // namespace omnibus
