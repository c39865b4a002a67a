#include "cli/loaded_model.h"

#include <fmt/format.h>

#include "cli/model_resolve.h"
#include "util/progress.h"

namespace omnibus {

StatusOr<LoadedModel> load_model_for_cli(const ModelFlags& flags) {
  const std::string& model = flags.model;
  LoadedModel m;
  OMNIBUS_ASSIGN_OR_RETURN(m.path, resolve_model_path(model));
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(m.path));
  m.file = std::move(file);
  m.pool = std::make_unique<ThreadPool>(flags.threads);
  {
    ProgressBar bar("loading " + model, 0, "MiB", double(1 << 20));
    OMNIBUS_ASSIGN_OR_RETURN(m.model,
                             load_model(m.file, *m.pool, [&bar](uint64_t done, uint64_t total) {
                               bar.update(done, total);
                             }));
  }
  OMNIBUS_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::from_gguf(*m.file));
  const ModelConfig& c = m.model->config();
  fmt::print(stderr, "model: {} ({}, {} layers, n_embd {}, {} heads / {} kv heads, vocab {}), {} threads\n",
             c.name, c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_vocab,
             m.pool->n_threads());
  return m;
}

}  // namespace omnibus
