// Qwen 3 (dense): the family's block with a per-head RMSNorm on Q and K
// before RoPE, no biases, NeoX RoPE (model/llama_family.h).
#include "model/llama_family.h"

namespace omnibus {

StatusOr<std::unique_ptr<Model>> load_qwen3(std::shared_ptr<const GgufFile> file,
                                            const ModelConfig& config, ThreadPool& pool,
                                            WeightLoader& weights) {
  return load_llama_family(std::move(file), config, pool, weights, {.qk_norm = true});
}

}  // namespace omnibus
