#include "cli/loaded_model.h"

#include <fmt/format.h>

#include <chrono>

#include "cli/model_resolve.h"
#include "tokenizer/vocab_compat.h"
#include "util/progress.h"

namespace omnibus {

namespace {

// load_model with a progress bar labelled `label`; seconds: how long it took.
StatusOr<std::unique_ptr<Model>> load_with_progress(const std::string& label,
                                                    std::shared_ptr<const GgufFile> file,
                                                    ThreadPool& pool, double& seconds) {
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar(label, 0, "MiB", double(1 << 20));
  StatusOr<std::unique_ptr<Model>> m = load_model(
      std::move(file), pool, [&bar](uint64_t done, uint64_t total) { bar.update(done, total); });
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

}  // namespace

StatusOr<LoadedModel> load_model_for_cli(const ModelFlags& flags) {
  const std::string& model = flags.model;
  LoadedModel m;
  OMNIBUS_ASSIGN_OR_RETURN(m.path, resolve_model_path(model));
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(m.path));
  m.file = std::move(file);
  m.pool = std::make_unique<ThreadPool>(flags.threads);
  double load_s = 0;
  OMNIBUS_ASSIGN_OR_RETURN(m.model,
                           load_with_progress("loading " + model, m.file, *m.pool, load_s));
  OMNIBUS_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::from_gguf(*m.file));
  OMNIBUS_ASSIGN_OR_RETURN(const std::string task, apply_task(flags, *m.model));
  const ModelConfig& c = m.model->config();
  fmt::print(stderr,
             "model: {} ({}, {} layers, n_embd {}, {} heads / {} kv heads, vocab {}), {} threads, "
             "loaded in {:.2f} s{}\n",
             c.name, c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_vocab,
             m.pool->n_threads(), load_s,
             task == "embed"
                 ? fmt::format("; task embed, pooling {}", pooling_name(m.model->pooling()))
                 : "");
  return m;
}

Status load_draft_model_for_cli(const std::string& path, LoadedModel& m, EngineConfig& cfg) {
  if (cfg.speculative.kind != SpeculativeKind::kDraft) return Status::ok();
  OMNIBUS_ASSIGN_OR_RETURN(const std::string resolved, resolve_model_path(path));
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(resolved));
  m.draft_file = std::move(file);
  double load_s = 0;
  OMNIBUS_ASSIGN_OR_RETURN(
      m.draft, load_with_progress("loading draft " + path, m.draft_file, *m.pool, load_s));
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::from_gguf(*m.draft_file));
  const Status same = check_same_vocabulary(*m.tokenizer, *tok);
  if (!same.is_ok()) return Status::invalid_argument("--draft-model {}: {}", path, same.message());
  const ModelConfig& c = m.draft->config();
  fmt::print(stderr, "draft model: {} ({}, {} layers, n_embd {}, vocab {}), loaded in {:.2f} s\n",
             c.name, c.arch, c.n_layer, c.n_embd, c.n_vocab, load_s);
  cfg.draft_model = m.draft.get();
  return Status::ok();
}

StatusOr<std::string> apply_task(const ModelFlags& flags, Model& model) {
  const ModelConfig& c = model.config();
  if (flags.task != "auto" && flags.task != "generate" && flags.task != "embed" &&
      flags.task != "score" && flags.task != "rerank") {
    return Status::invalid_argument(
        "--task must be auto, generate, embed, score or rerank, got '{}'", flags.task);
  }
  // score / rerank (vLLM's names): embed with rank pooling.
  const bool ranks = flags.task == "score" || flags.task == "rerank";
  if (ranks && !flags.pooling.empty() && flags.pooling != "rank") {
    return Status::invalid_argument("--task {} scores with --pooling rank, not '{}'", flags.task,
                                    flags.pooling);
  }
  std::string task = ranks ? "embed" : flags.task;
  if (task == "auto") {
    task = model.is_encoder() || c.pooling != PoolingType::kUnspecified || !flags.pooling.empty()
               ? "embed"
               : "generate";
  }
  if (task == "generate") {
    if (model.is_encoder()) {
      return Status::invalid_argument(
          "--task generate: {} is an embedding model (an encoder); use --task embed", c.arch);
    }
    if (c.pooling == PoolingType::kRank) {
      // Its converter replaced the output head by the classifier's two rows.
      return Status::invalid_argument(
          "--task generate: this GGUF is a reranker (pooling_type rank); use --task embed and "
          "/v1/rerank or /v1/score");
    }
    if (!flags.pooling.empty()) return Status::invalid_argument("--pooling needs --task embed");
    return task;
  }
  PoolingType p = model.pooling();
  if (ranks) {
    p = PoolingType::kRank;
  } else if (!flags.pooling.empty()) {
    const std::optional<PoolingType> parsed = parse_pooling(flags.pooling);
    if (!parsed)
      return Status::invalid_argument("--pooling must be none, mean, cls, last or rank, got '{}'",
                                      flags.pooling);
    p = *parsed;
  } else if (c.pooling != PoolingType::kUnspecified) {
    p = c.pooling;
  }
  const Status s = model.set_pooling(p);
  if (!s.is_ok()) return Status::invalid_argument("--pooling: {}", s.message());
  return task;
}

}  // namespace omnibus
