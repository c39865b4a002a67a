// LoadedModel: what every subcommand needs before it can run a model — the
// mapped GGUF file, the thread pool, the model and its tokenizer — loaded with
// a progress bar and clear errors.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace omnibus {

// -m and -t (cli/engine_flags.h declares them).
struct ModelFlags {
  std::string model = "smollm2-135m";  // a GGUF path or a bundled name
  int threads = 0;                     // 0 = all cores
  // serve and bench (add_task_flags): what the model is served for.
  // "auto": embed when the GGUF says it pools (<arch>.pooling_type) or is an
  // encoder, else generate. embed: the model pools (--pooling, default the
  // GGUF's, else last); generate: a model that only embeds is refused.
  std::string task = "auto";  // --task auto|generate|embed
  std::string pooling;        // --pooling mean|cls|last; "": the GGUF's
};

struct LoadedModel {
  std::string path;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  // --draft-model (load_draft_model_for_cli): on the same thread pool.
  std::shared_ptr<const GgufFile> draft_file;
  std::unique_ptr<Model> draft;
};

StatusOr<LoadedModel> load_model_for_cli(const ModelFlags& flags);

// With cfg.speculative.kind kDraft: loads the draft model at `path` beside
// m's model (its thread pool), checks that its vocabulary reads as m's
// (tokenizer/vocab_compat.h) and points cfg.draft_model at it. No-op otherwise.
Status load_draft_model_for_cli(const std::string& path, LoadedModel& m, EngineConfig& cfg);

// The task `flags` resolves to for the loaded model ("generate" or "embed"),
// after applying --pooling to it; kInvalidArgument names the flag.
StatusOr<std::string> apply_task(const ModelFlags& flags, Model& model);

}  // namespace omnibus
