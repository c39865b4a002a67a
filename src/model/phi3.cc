// Phi-3 / Phi-3.5 / Phi-4-mini: the family's block with fused tensors (one
// attn_qkv.weight; one ffn_up.weight holding gate and up), NeoX RoPE and,
// for the long-context models, LongRoPE: rope_factors_short/long.weight
// chosen by the served context against rope.scaling.original_context_length,
// with rope.scaling.attn_factor on cos and sin (model/llama_family.h).
// Its sliding_window metadata is ignored, as llama.cpp does (phi3.cpp: the
// converted files do not describe the window correctly).
#include "model/llama_family.h"

namespace omnibus {

StatusOr<std::unique_ptr<Model>> load_phi3(std::shared_ptr<const GgufFile> file,
                                           const ModelConfig& config, ThreadPool& pool,
                                           WeightLoader& weights) {
  return load_llama_family(std::move(file), config, pool, weights, {});
}

}  // namespace omnibus
