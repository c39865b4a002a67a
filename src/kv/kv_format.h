// KvFormat: the element formats a KV cache can be stored in, with one table of
// traits. A KV format is not a weight dtype (kernels/dtype.h): q8 here is not
// ggml's Q8_0 layout, q4 is not Q4_1, and kivi2 has no weight counterpart.
// Byte layouts of each format are in kv/kv_quant.h and docs/kv-quantization.md.
//
// Layering: kv/ owns every KV format. The code that reads and writes them
// (the row codecs kv/kv_quant*, the residual slots kv/kv_quant_kivi.h, and
// the paged attention kernel kv/attention.h that dequantizes inside its inner
// loop) lives in kv/ with this type; kv/ depends on kernels/ only for the
// thread pool, CPU feature checks and float SIMD helpers.
//
// Thread-safety: constant data and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/status.h"

namespace omnibus {

enum class KvFormat : uint8_t { kF32, kF16, kQ8, kQ4, kKivi2 };

struct KvFormatTraits {
  std::string_view name;        // as --kv-cache-dtype spells it: "f32", "f16", "q8", "q4", "kivi2"
  bool quantized;               // q8, q4, kivi2: quantized by kv_store, dequantized in attention
  int kivi_bits;                // bits of KIVI keys (kv/kv_quant_kivi.h): kivi2 2, q4 4; else 0
  int default_residual_blocks;  // completed groups read in fp16 (kivi2 1, q4 0: measured,
                                // docs/kv-quantization.md); 0 without a residual
  bool rotates_v;               // values stored rotated by kv_hadamard (kivi2)
  int head_dim_multiple;        // head_dim must be a multiple of this (q4 2, kivi2 4)
};

// REQUIRES: f is one of the enumerators.
const KvFormatTraits& kv_format_traits(KvFormat f);

inline std::string_view kv_format_name(KvFormat f) { return kv_format_traits(f).name; }
inline bool kv_format_quantized(KvFormat f) { return kv_format_traits(f).quantized; }
inline int kv_kivi_bits(KvFormat f) { return kv_format_traits(f).kivi_bits; }
// Formats with KIVI keys keep their open key group (and the residual window)
// in fp16 residual slots (kv/kv_quant_kivi.h): q4, kivi2.
inline bool kv_has_residual(KvFormat f) { return kv_kivi_bits(f) != 0; }
inline int kv_default_residual_blocks(KvFormat f) {
  return kv_format_traits(f).default_residual_blocks;
}
inline bool kv_rotates_v(KvFormat f) { return kv_format_traits(f).rotates_v; }
// Whether the format can store rows of head_dim elements.
inline bool kv_format_supports_head_dim(KvFormat f, int head_dim) {
  return head_dim > 0 && head_dim % kv_format_traits(f).head_dim_multiple == 0;
}

// Accepts the names above; a Status naming the choices otherwise.
StatusOr<KvFormat> parse_kv_format(std::string_view name);

// Bytes of one (block, KV head) unit of the K pool and of the V pool
// (layouts: kv/kv_quant.h). REQUIRES: kv_format_supports_head_dim, bs >= 1.
struct KvUnitBytes {
  size_t k = 0, v = 0;
};
KvUnitBytes kv_unit_bytes(KvFormat f, int block_size, int head_dim);

}  // namespace omnibus
