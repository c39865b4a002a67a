#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "gguf/gguf_file.h"
#include "model/architectures.h"

namespace omnibus {

// Reads "<arch>.<suffix>" as a positive int.
Status read_positive(const GgufFile& f, const std::string& arch, const char* suffix, int* out,
                     bool required) {
  const std::string key = arch + "." + suffix;
  const std::optional<int64_t> v = f.get_int(key);
  if (!v) {
    if (!required) return Status::ok();
    return Status::corrupt("{}: missing or non-integer metadata key '{}'", f.path(), key);
  }
  if (*v <= 0 || *v > (int64_t(1) << 30)) {
    return Status::corrupt("{}: metadata '{}' = {} is out of range", f.path(), key, *v);
  }
  *out = int(*v);
  return Status::ok();
}

StatusOr<ModelConfig> read_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::optional<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return Status::corrupt("{}: missing general.architecture", f.path());
  c.arch = std::string(*arch);
  const Architecture* row = find_architecture(c.arch);
  if (row == nullptr) {
    return Status::unsupported("{}: architecture '{}' is not supported (supported: {})", f.path(),
                               c.arch, architecture_list());
  }
  c.name = std::string(f.get_string("general.name").value_or(c.arch));

  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "block_count", &c.n_layer));
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "embedding_length", &c.n_embd));
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "feed_forward_length", &c.n_ff));
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "attention.head_count", &c.n_head));
  c.n_head_kv = c.n_head;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "attention.head_count_kv", &c.n_head_kv, false));
  c.n_ctx_train = 2048;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "context_length", &c.n_ctx_train, false));
  if (c.n_embd % c.n_head != 0 && !f.get_int(c.arch + ".attention.key_length")) {
    return Status::corrupt("{}: embedding_length {} is not a multiple of head_count {}", f.path(),
                           c.n_embd, c.n_head);
  }
  c.head_dim = c.n_embd / c.n_head;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "attention.key_length", &c.head_dim, false));
  int value_length = c.head_dim;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "attention.value_length", &value_length, false));
  if (value_length != c.head_dim) {
    return Status::unsupported("{}: key_length {} != value_length {}", f.path(), c.head_dim,
                               value_length);
  }
  if (c.n_head % c.n_head_kv != 0) {
    return Status::corrupt("{}: head_count {} is not a multiple of head_count_kv {}", f.path(),
                           c.n_head, c.n_head_kv);
  }
  if (const auto eps = f.get_float(c.arch + ".attention.layer_norm_rms_epsilon")) {
    c.norm_eps = float(*eps);
  }
  if (const auto causal = f.get_bool(c.arch + ".attention.causal")) c.causal = *causal;
  if (f.find(c.arch + ".pooling_type")) {
    const auto p = f.get_int(c.arch + ".pooling_type");
    if (!p || *p < 0 || *p > 4) {
      return Status::corrupt("{}: '{}.pooling_type' is not 0..4", f.path(), c.arch);
    }
    c.pooling = PoolingType(*p);
  }

  // As llama.cpp's llama_model_rope_type(): Llama pairs adjacent dims, the
  // others rotate the two halves of a head (GPT-NeoX style).
  c.rope.mode = row->rope_mode;
  c.rope.n_rot = c.head_dim;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "rope.dimension_count", &c.rope.n_rot, false));
  if (c.rope.n_rot > c.head_dim || c.rope.n_rot % 2 != 0) {
    return Status::corrupt("{}: rope.dimension_count {} must be even and <= head dim {}", f.path(),
                           c.rope.n_rot, c.head_dim);
  }
  c.rope.freq_base = float(f.get_float(c.arch + ".rope.freq_base").value_or(10000.0));
  const std::string_view scaling = f.get_string(c.arch + ".rope.scaling.type").value_or("linear");
  if (scaling != "linear" && scaling != "none") {
    return Status::unsupported("{}: rope.scaling.type '{}' is not supported (linear, none)",
                               f.path(), scaling);
  }
  if (const auto factor = f.get_float(c.arch + ".rope.scaling.factor")) {
    if (scaling == "linear" && *factor > 0) c.rope.freq_scale = float(1.0 / *factor);
  }
  OMNIBUS_RETURN_IF_ERROR(
      read_positive(f, c.arch, "rope.scaling.original_context_length", &c.rope_orig_ctx, false));
  c.rope_attn_factor = float(f.get_float(c.arch + ".rope.scaling.attn_factor").value_or(1.0));
  if (!(c.rope_attn_factor > 0 && c.rope_attn_factor < 100)) {
    return Status::corrupt("{}: rope.scaling.attn_factor {} is out of range", f.path(),
                           c.rope_attn_factor);
  }

  // Vocabulary size: the token list is authoritative.
  if (const auto tokens = f.get_string_array("tokenizer.ggml.tokens")) {
    c.n_vocab = int(tokens->size());
  } else {
    OMNIBUS_RETURN_IF_ERROR(read_positive(f, c.arch, "vocab_size", &c.n_vocab));
  }
  if (c.n_vocab <= 0) return Status::corrupt("{}: empty vocabulary", f.path());

  if (row->read_extras != nullptr) OMNIBUS_RETURN_IF_ERROR(row->read_extras(f, &c));
  return c;
}

const char* pooling_name(PoolingType p) {
  switch (p) {
    case PoolingType::kNone:
      return "none";
    case PoolingType::kMean:
      return "mean";
    case PoolingType::kCls:
      return "cls";
    case PoolingType::kLast:
      return "last";
    case PoolingType::kRank:
      return "rank";
    case PoolingType::kUnspecified:
      break;
  }
  return "unspecified";
}

std::optional<PoolingType> parse_pooling(std::string_view name) {
  for (PoolingType p : {PoolingType::kNone, PoolingType::kMean, PoolingType::kCls,
                        PoolingType::kLast, PoolingType::kRank}) {
    if (name == pooling_name(p)) return p;
  }
  return std::nullopt;
}

float ModelConfig::query_scale() const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(float(head_dim));
}

}  // namespace omnibus
