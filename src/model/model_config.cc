#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "gguf/gguf_file.h"

namespace omnibus {
namespace {

// Reads "<arch>.<suffix>" as a positive int.
Status read_positive(const GgufFile& f, const std::string& arch, const char* suffix, int* out,
                     bool required = true) {
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

// Gemma 3 (as llama.cpp reads it): sliding-window attention on every layer
// but each 6th when attention.sliding_window is set (the pattern may be
// overridden by attention.sliding_window_pattern, a period or a per-layer
// array), RoPE base rope.freq_base_swa (default 10000) on those layers, an
// optional final logit soft-cap, and queries scaled by 1/sqrt(head_dim)
// (query_pre_attn_scalar = head_dim), except the 62-layer 27B model, which
// uses 1/sqrt(n_embd / n_head).
Status read_gemma3_extras(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->arch;
  OMNIBUS_RETURN_IF_ERROR(
      read_positive(f, a, "attention.sliding_window", &c->sliding_window, false));
  if (c->sliding_window > 0) {
    c->layer_is_swa.assign(size_t(c->n_layer), false);
    const std::string key = a + ".attention.sliding_window_pattern";
    if (const auto per_layer = f.get_int_array(key)) {
      if (per_layer->size() != size_t(c->n_layer)) {
        return Status::corrupt("{}: '{}' has {} entries for {} layers", f.path(), key,
                               per_layer->size(), c->n_layer);
      }
      for (int il = 0; il < c->n_layer; ++il) c->layer_is_swa[size_t(il)] = (*per_layer)[size_t(il)] != 0;
    } else {
      int64_t period = 6;
      if (f.find(key)) {
        const auto v = f.get_int(key);
        if (!v || *v < 0) return Status::unsupported("{}: cannot read '{}'", f.path(), key);
        period = *v;
      }
      // period 0: every layer sliding; else layer il is global when il % period == period - 1.
      for (int il = 0; il < c->n_layer; ++il) {
        c->layer_is_swa[size_t(il)] = period == 0 || il % period < period - 1;
      }
    }
  }
  c->rope_freq_base_local = float(f.get_float(a + ".rope.freq_base_swa").value_or(10000.0));
  c->final_logit_softcap = float(f.get_float(a + ".final_logit_softcapping").value_or(0.0));
  if (c->final_logit_softcap < 0) {
    return Status::corrupt("{}: negative final_logit_softcapping", f.path());
  }
  if (f.find(a + ".attn_logit_softcapping")) {
    return Status::unsupported("{}: attention logit soft-capping (Gemma 2) is not supported",
                               f.path());
  }
  c->attn_scale = c->n_layer == 62 ? 1.0f / std::sqrt(float(c->n_embd / c->n_head))
                                   : 1.0f / std::sqrt(float(c->head_dim));
  return Status::ok();
}

// Mixture of experts: expert_count experts, expert_used_count of them per
// token, each with expert_feed_forward_length hidden units (llama.cpp's
// default when absent: feed_forward_length / expert_used_count).
Status read_moe(const GgufFile& f, ModelConfig* c) {
  const std::string& a = c->arch;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, a, "expert_count", &c->n_expert));
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, a, "expert_used_count", &c->n_expert_used));
  if (c->n_expert_used > c->n_expert) {
    return Status::corrupt("{}: expert_used_count {} > expert_count {}", f.path(),
                           c->n_expert_used, c->n_expert);
  }
  c->n_ff_exp = c->n_ff / c->n_expert_used;
  OMNIBUS_RETURN_IF_ERROR(read_positive(f, a, "expert_feed_forward_length", &c->n_ff_exp, false));
  if (c->n_ff_exp <= 0) return Status::corrupt("{}: expert feed-forward length is 0", f.path());
  return Status::ok();
}

}  // namespace

StatusOr<ModelConfig> read_model_config(const GgufFile& f) {
  ModelConfig c;
  const std::optional<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return Status::corrupt("{}: missing general.architecture", f.path());
  c.arch = std::string(*arch);
  static constexpr std::string_view kArchs[] = {"llama", "gemma3", "qwen2",
                                                "qwen3", "qwen3moe", "phi3", "bert"};
  if (std::find(std::begin(kArchs), std::end(kArchs), c.arch) == std::end(kArchs)) {
    return Status::unsupported(
        "{}: architecture '{}' is not supported (supported: llama (Llama 2/3, Mistral, SmolLM2), "
        "gemma3, qwen2, qwen3, qwen3moe, phi3, bert)",
        f.path(), c.arch);
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
  if (c.arch == "bert") {
    const auto eps = f.get_float("bert.attention.layer_norm_epsilon");
    if (!eps) return Status::corrupt("{}: missing 'bert.attention.layer_norm_epsilon'", f.path());
    c.norm_eps = float(*eps);
    c.causal = false;
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
  c.rope.mode = c.arch == "llama" ? RopeMode::kNormal : RopeMode::kNeox;
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

  if (c.arch == "gemma3") OMNIBUS_RETURN_IF_ERROR(read_gemma3_extras(f, &c));
  if (c.arch == "qwen3moe") OMNIBUS_RETURN_IF_ERROR(read_moe(f, &c));
  return c;
}

const char* pooling_name(PoolingType p) {
  switch (p) {
    case PoolingType::kNone: return "none";
    case PoolingType::kMean: return "mean";
    case PoolingType::kCls: return "cls";
    case PoolingType::kLast: return "last";
    case PoolingType::kRank: return "rank";
    case PoolingType::kUnspecified: break;
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
