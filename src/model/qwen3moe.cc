// Qwen 3 MoE (Qwen3-30B-A3B, ...): Qwen 3's attention (per-head Q/K norms)
// with a mixture-of-experts feed-forward in every layer: softmax router,
// top-k experts with normalised weights, experts batched per step
// (model/moe.h, model/llama_family.h).
#include "model/llama_family.h"

#include "util/check.h"

namespace omnibus {

StatusOr<std::unique_ptr<Model>> load_qwen3moe(std::shared_ptr<const GgufFile> file,
                                               const ModelConfig& config, ThreadPool& pool,
                                               WeightLoader& weights) {
  OMNIBUS_CHECK(config.is_moe());  // read_model_config requires the expert counts
  return load_llama_family(std::move(file), config, pool, weights, {.qk_norm = true});
}

}  // namespace omnibus
