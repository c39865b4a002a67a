// ModelConfig: the hyper-parameters of a model, read from GGUF metadata
// (`<arch>.block_count`, `<arch>.attention.head_count`, ...). Everything the
// forward pass needs to know about shapes lives here; nothing is assumed.
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/ops.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;

// How a sequence's last hidden states become one embedding (llama.cpp's
// enum llama_pooling_type; <arch>.pooling_type): none (one vector per token),
// the mean of all tokens, the first token's ([CLS]), the last token's, or a
// reranker's score (rank: CLS pooled through the classification head).
enum class PoolingType : int8_t {
  kUnspecified = -1,
  kNone = 0,
  kMean = 1,
  kCls = 2,
  kLast = 3,
  kRank = 4
};

// "none", "mean", "cls", "last", "rank" ("unspecified" for kUnspecified).
const char* pooling_name(PoolingType p);
// The inverse of pooling_name (without "unspecified"); nullopt for other text.
std::optional<PoolingType> parse_pooling(std::string_view name);

struct ModelConfig {
  std::string arch;  // general.architecture: llama, gemma3, qwen2, qwen3, qwen3moe, phi3,
                     // bert (an encoder)
  std::string name;  // general.name (for logs)
  int n_vocab = 0;
  int n_ctx_train = 0;  // <arch>.context_length (bert: its absolute positions)
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // <arch>.attention.key_length, or n_embd / n_head
  int n_ff = 0;
  float norm_eps = 1e-5f;  // <arch>.attention.layer_norm_rms_epsilon (bert:
                           // attention.layer_norm_epsilon, of its LayerNorms)
  // Embedding models: attention over the whole sequence both ways
  // (<arch>.attention.causal = false: bert), and the pooling the GGUF asks
  // for (<arch>.pooling_type; kUnspecified when absent: a generator).
  bool causal = true;
  PoolingType pooling = PoolingType::kUnspecified;
  RopeParams rope;  // mode from the architecture, base/n_rot from metadata

  // Gemma 3 style extras (defaults mean "not used").
  int sliding_window = 0;          // <arch>.attention.sliding_window: a query at p sees
                                   // keys (p - sliding_window, p] on sliding layers
  std::vector<bool> layer_is_swa;  // [n_layer] sliding-window layers; empty: none.
                                   // <arch>.attention.sliding_window_pattern (N: every
                                   // Nth layer global, or a per-layer array), Gemma 3: 6
  float rope_freq_base_local = 0;  // RoPE base of sliding-window layers
                                   // (<arch>.rope.freq_base_swa, Gemma 3: 10000)
  float attn_scale = 0;            // query scale; 0: 1/sqrt(head_dim)
  float final_logit_softcap = 0;   // <arch>.final_logit_softcapping; 0: off

  // Mixture of experts (qwen3moe; 0: a dense feed-forward).
  int n_expert = 0;       // <arch>.expert_count
  int n_expert_used = 0;  // <arch>.expert_used_count: experts per token (top-k)
  int n_ff_exp = 0;       // <arch>.expert_feed_forward_length: each expert's hidden width

  // RoPE scaling beyond rope.freq_scale (the frequency factors themselves are
  // tensors: rope_freqs.weight, rope_factors_{short,long}.weight).
  int rope_orig_ctx = 0;         // <arch>.rope.scaling.original_context_length; 0: unknown
  float rope_attn_factor = 1.f;  // <arch>.rope.scaling.attn_factor (LongRoPE magnitude)

  int n_q() const { return n_head * head_dim; }      // width of the query projection
  int n_kv() const { return n_head_kv * head_dim; }  // width of the key/value projections
  bool is_moe() const { return n_expert > 0; }
  bool is_swa_layer(int il) const {
    return sliding_window > 0 && size_t(il) < layer_is_swa.size() && layer_is_swa[size_t(il)];
  }
  // Query scaling applied in attention.
  float query_scale() const;
};

// Reads and validates the config (positive sizes, heads dividing evenly, ...).
StatusOr<ModelConfig> read_model_config(const GgufFile& file);

// Reads metadata "<arch>.<suffix>" as an int in [1, 2^30] into *out; a
// missing key is an error when `required`, else leaves *out as it is.
// (For the architectures' read_extras, architectures.h.)
Status read_positive(const GgufFile& f, const std::string& arch, const char* suffix, int* out,
                     bool required = true);

}  // namespace omnibus
