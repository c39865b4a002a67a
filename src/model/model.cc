#include "model/model.h"

#include "gguf/gguf_file.h"
#include "model/gemma3.h"
#include "model/llama.h"
#include "model/weights.h"

namespace omnibus {

KvGeometry Model::kv_geometry(int block_size, KvFormat format) const {
  KvGeometry g;
  g.n_layers = config_.n_layer;
  g.n_kv_heads = config_.n_head_kv;
  g.head_dim = config_.head_dim;
  g.block_size = block_size;
  g.format = format;
  return g;
}

StatusOr<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file, ThreadPool& pool,
                                            const LoadProgressFn& progress) {
  OMNIBUS_ASSIGN_OR_RETURN(ModelConfig config, read_model_config(*file));
  WeightLoader weights(*file, progress);
  StatusOr<std::unique_ptr<Model>> model =
      config.arch == "llama"    ? load_llama(file, config, pool, weights)
      : config.arch == "gemma3" ? load_gemma3(file, config, pool, weights)
                                : StatusOr<std::unique_ptr<Model>>(Status::unsupported(
                                      "{}: architecture '{}' is not implemented yet",
                                      file->path(), config.arch));
  if (!model.is_ok()) return model.status();
  (*model)->keep_alive(weights.owned_vectors());
  weights.finish();
  return model;
}

}  // namespace omnibus
