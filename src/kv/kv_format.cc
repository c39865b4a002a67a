#include "kv/kv_format.h"

#include <iterator>

#include "util/check.h"

namespace omnibus {
namespace {

// Indexed by KvFormat: name, quantized, kivi_bits, default_residual_blocks,
// rotates_v, head_dim_multiple.
constexpr KvFormatTraits kTraits[] = {
    {"f32", false, 0, 0, false, 1},  // kF32
    {"f16", false, 0, 0, false, 1},  // kF16
    {"q8", true, 0, 0, false, 1},    // kQ8
    {"q4", true, 4, 0, false, 2},    // kQ4
    {"kivi2", true, 2, 1, true, 4},  // kKivi2
};
static_assert(std::size(kTraits) == size_t(KvFormat::kKivi2) + 1);
constexpr KvFormat kAll[] = {KvFormat::kF32, KvFormat::kF16, KvFormat::kQ8, KvFormat::kQ4,
                             KvFormat::kKivi2};

}  // namespace

const KvFormatTraits& kv_format_traits(KvFormat f) {
  const size_t i = size_t(f);
  OMNIBUS_CHECK(i < std::size(kTraits));
  return kTraits[i];
}

StatusOr<KvFormat> parse_kv_format(std::string_view name) {
  for (KvFormat f : kAll) {
    if (name == kv_format_name(f)) return f;
  }
  return Status::invalid_argument("unknown KV cache dtype '{}' (choices: f16, f32, q8, q4, kivi2)",
                                  name);
}

}  // namespace omnibus
