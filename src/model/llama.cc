// Llama 2/3, Mistral, SmolLM2 and the other `llama` GGUFs: the family's
// common block (model/llama_family.h) with adjacent-pair RoPE; Llama 3's
// frequency scaling comes with the file as rope_freqs.weight.
#include "model/llama_family.h"

namespace omnibus {

StatusOr<std::unique_ptr<Model>> load_llama(std::shared_ptr<const GgufFile> file,
                                            const ModelConfig& config, ThreadPool& pool,
                                            WeightLoader& weights) {
  return load_llama_family(std::move(file), config, pool, weights, {});
}

}  // namespace omnibus
