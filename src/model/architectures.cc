// The architecture table (architectures.h). The llama-family rows differ only
// in their extra tensors and RoPE mode; their common forward pass is
// llama_family.cc, Gemma 3's is gemma3.cc.
#include "model/architectures.h"

#include <fmt/format.h>

#include "model/bert.h"
#include "model/gemma3.h"
#include "model/moe.h"

namespace omnibus {

namespace {

// Notes per row:
//  - llama: Llama 3's frequency scaling comes with the file as rope_freqs.weight;
//    attention.key_length may differ from n_embd / n_head (Mistral Nemo).
//  - qwen3moe: Qwen 3's attention with a mixture-of-experts feed-forward in
//    every layer (moe.h): softmax router, top-k experts with normalised weights.
//  - phi3: fused tensors (one attn_qkv.weight; one ffn_up.weight holding gate
//    and up) and, for the long-context models, LongRoPE (rope_factors_short/
//    long.weight chosen by the served context against rope.scaling.
//    original_context_length, rope.scaling.attn_factor on cos and sin). Its
//    sliding_window metadata is ignored, as llama.cpp does (phi3.cpp: the
//    converted files do not describe the window correctly).
//  - gemma3: read_gemma3_extras and load_gemma3 (gemma3.h).
//  - bert: an encoder (bert.h): absolute positions, no RoPE (its mode is unused).
constexpr Architecture kArchitectures[] = {
    {"llama", "Llama 2/3, Mistral, SmolLM2", RopeMode::kNormal, nullptr, nullptr, {}},
    {"gemma3", "Gemma 3", RopeMode::kNeox, read_gemma3_extras, load_gemma3, {}},
    {"qwen2",
     "Qwen 2/2.5, DeepSeek-R1-Distill-Qwen",
     RopeMode::kNeox,
     nullptr,
     nullptr,
     {.require_biases = true}},
    {"qwen3", "Qwen 3", RopeMode::kNeox, nullptr, nullptr, {.qk_norm = true}},
    {"qwen3moe",
     "Qwen3-30B-A3B, Qwen3-235B-A22B",
     RopeMode::kNeox,
     read_moe_config,
     nullptr,
     {.qk_norm = true}},
    {"phi3", "Phi-3, Phi-3.5, Phi-4-mini", RopeMode::kNeox, nullptr, nullptr, {}},
    {"bert",
     "BERT encoders and cross-encoders (all-MiniLM-L6-v2)",
     RopeMode::kNeox,
     read_bert_extras,
     load_bert,
     {}},
};

}  // namespace

std::span<const Architecture> architectures() { return kArchitectures; }

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string architecture_list() {
  std::string out;
  for (const Architecture& a : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} ({})", a.name, a.models);
  }
  return out;
}

}  // namespace omnibus
