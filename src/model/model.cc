#include "model/model.h"

#include <utility>

#include "gguf/gguf_file.h"
#include "model/architectures.h"
#include "model/llama_family.h"
#include "model/weights.h"
#include "util/check.h"

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

Status Model::set_pooling(PoolingType p) {
  if (!supports_pooling(p)) {
    return Status::invalid_argument("{} models cannot pool '{}'", config_.arch, pooling_name(p));
  }
  pooling_ = p;
  return Status::ok();
}

StatusOr<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file, ThreadPool& pool,
                                            const LoadProgressFn& progress) {
  OMNIBUS_ASSIGN_OR_RETURN(ModelConfig config, read_model_config(*file));
  WeightLoader weights(*file, progress);
  const Architecture* row = find_architecture(config.arch);
  OMNIBUS_CHECK(row != nullptr);  // read_model_config accepts only the table's
  StatusOr<std::unique_ptr<Model>> model =
      row->load != nullptr ? row->load(file, config, pool, weights)
                           : load_llama_family(file, config, pool, weights, row->family);
  if (!model.is_ok()) return model.status();
  // The GGUF's pooling when the model can do it (set_pooling may change it).
  if (config.pooling != PoolingType::kUnspecified && (*model)->supports_pooling(config.pooling)) {
    OMNIBUS_RETURN_IF_ERROR((*model)->set_pooling(config.pooling));
  }
  (*model)->keep_alive(weights.owned_vectors());
  weights.finish();
  return model;
}

}  // namespace omnibus
