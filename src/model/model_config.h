// ModelConfig: the hyper-parameters of a model, read from GGUF metadata
// (`<arch>.block_count`, `<arch>.attention.head_count`, ...). Everything the
// forward pass needs to know about shapes lives here; nothing is assumed.
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/ops.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;

struct ModelConfig {
  std::string arch;        // general.architecture: "llama", "gemma3"
  std::string name;        // general.name (for logs)
  int n_vocab = 0;
  int n_ctx_train = 0;     // <arch>.context_length
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;        // <arch>.attention.key_length, or n_embd / n_head
  int n_ff = 0;
  float norm_eps = 1e-5f;  // <arch>.attention.layer_norm_rms_epsilon
  RopeParams rope;         // mode from the architecture, base/n_rot from metadata

  // Gemma 3 style extras (defaults mean "not used").
  int sliding_window = 0;          // <arch>.attention.sliding_window
  int sliding_window_pattern = 0;  // every Nth layer is global, the rest sliding
  float rope_freq_base_local = 0;  // RoPE base of sliding-window layers

  int n_q() const { return n_head * head_dim; }    // width of the query projection
  int n_kv() const { return n_head_kv * head_dim; } // width of the key/value projections
};

// Reads and validates the config (positive sizes, heads dividing evenly, ...).
StatusOr<ModelConfig> read_model_config(const GgufFile& file);

}  // namespace omnibus
