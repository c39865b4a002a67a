// Qwen 2 / 2.5 (and the DeepSeek-R1 distills built on them): the family's
// block with biases on Q, K and V and NeoX RoPE (model/llama_family.h).
#include "model/llama_family.h"

namespace omnibus {

StatusOr<std::unique_ptr<Model>> load_qwen2(std::shared_ptr<const GgufFile> file,
                                            const ModelConfig& config, ThreadPool& pool,
                                            WeightLoader& weights) {
  return load_llama_family(std::move(file), config, pool, weights, {.require_biases = true});
}

}  // namespace omnibus
