// The flags every subcommand that runs a model shares, declared once: the
// model and its threads (ModelFlags, cli/loaded_model.h), and the Engine's
// scheduling, KV pool and KV format settings (EngineFlags), with their
// mapping into EngineConfig.
//
//   serve, bench:          add_model_flags + add_engine_flags (all of them)
//   generate, perplexity:  add_model_flags + add_kv_format_flags (the KV
//                          format only; their context and batch flags set
//                          the rest of the EngineConfig); generate also
//                          add_speculative_flags
//
// Thread-safety: values and pure functions; the add_* functions register
// references to the flag structs, which must outlive the CLI::App's parse.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <utility>

#include "cli/loaded_model.h"
#include "engine/engine.h"
#include "util/status.h"

namespace omnibus {

struct EngineFlags {
  int max_num_seqs = 256;                // --max-num-seqs
  int max_num_batched_tokens = 512;      // --max-num-batched-tokens
  int long_prefill_token_threshold = 0;  // --long-prefill-token-threshold (0: budget / 4)
  int max_num_partial_prefills = 2;      // --max-num-partial-prefills
  double max_itl_ms = 0;                 // --max-itl-ms
  int block_size = 16;                   // --block-size
  int max_model_len = 0;                 // --max-model-len
  std::string kv_cache_memory;           // --kv-cache-memory; "": from the available memory
  std::string kv_dtype = "f16";          // --kv-cache-dtype
  int kv_residual_blocks = -1;           // --kv-residual-blocks; -1: the format's default
  bool no_sliding_window_kv = false;     // --no-sliding-window-kv
  bool no_prefix_caching = false;        // --no-prefix-caching
  std::string scheduling_policy = "cache-aware";  // --scheduling-policy
  std::string kv_offload_dir;                     // --kv-offload-dir; "": no disk tier
  std::string kv_offload_size = "8GiB";           // --kv-offload-size
  bool no_kv_offload_finished = false;            // --no-kv-offload-finished
  std::string speculative = "none";               // --speculative
  int num_speculative_tokens = 4;                 // --num-speculative-tokens
  int spec_ngram_min = 1;                         // --spec-ngram-min
  int spec_ngram_max = 4;                         // --spec-ngram-max
  int spec_max_step_tokens = 32;                  // --spec-max-step-tokens
  bool no_spec_backoff = false;                   // --no-spec-backoff
  std::string draft_model;                        // --draft-model (implies --speculative draft)
  std::string draft_kv_cache_memory;  // --draft-kv-cache-memory; "": the target's tokens
};

// -m,--model and -t,--threads.
void add_model_flags(CLI::App& cmd, ModelFlags& f);
// --task and --pooling (serve, bench).
void add_task_flags(CLI::App& cmd, ModelFlags& f);
// --kv-cache-dtype, --kv-residual-blocks and --no-sliding-window-kv.
void add_kv_format_flags(CLI::App& cmd, EngineFlags& f);
// --speculative, --num-speculative-tokens, --spec-ngram-min/max,
// --spec-max-step-tokens, --draft-model and --draft-kv-cache-memory (serve
// and bench through add_engine_flags; generate).
void add_speculative_flags(CLI::App& cmd, EngineFlags& f);
// Every engine flag: --max-num-seqs, --max-num-batched-tokens, --block-size,
// --kv-cache-memory, --max-model-len, the KV format flags,
// --no-prefix-caching, --scheduling-policy, the disk tier's
// --kv-offload-dir, --kv-offload-size, --no-kv-offload-finished and the
// speculative flags.
void add_engine_flags(CLI::App& cmd, EngineFlags& f);

// Registers subcommand `name` of a command that runs a model. Its options
// live in one shared Options, whose `model` gets add_model_flags; when the
// user picks the subcommand, exit_code = run(options). Returns the subcommand,
// for the caller's own flags, and the Options they write to.
template <typename Options, typename Run>
std::pair<CLI::App*, std::shared_ptr<Options>> add_model_command(CLI::App& app, int& exit_code,
                                                                 const std::string& name,
                                                                 const std::string& description,
                                                                 Run run) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(name, description);
  add_model_flags(*cmd, o->model);
  cmd->callback([o, &exit_code, run] { exit_code = run(*o); });
  return {cmd, o};
}

// The EngineConfig the flags describe (eog_ids left empty: they come from the
// tokenizer; model_fingerprint 0: set_model_identity). kInvalidArgument names
// the flag whose value is wrong.
StatusOr<EngineConfig> to_engine_config(const EngineFlags& f);
// What the EngineConfig takes from the loaded model: its end-of-generation
// ids and, when the disk tier is on, its fingerprint (gguf_fingerprint).
void set_model_identity(const LoadedModel& m, EngineConfig& cfg);

}  // namespace omnibus
