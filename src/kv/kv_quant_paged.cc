// Scalar row reader over every KV format (kv_quant_paged.h).
#include "kv/kv_quant_paged.h"

#include <vector>

#include "kv/kv_quant_kivi.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus {

void kv_read_row(const PagedKvLayer& kv, const AttentionSeq& s, bool is_v, int32_t j, int h,
                 int32_t qpos, float* y) {
  const int bs = kv.block_size, hd = kv.head_dim;
  const int64_t b = s.block_table[j / bs];
  const int r = j % bs;
  const uint8_t* unit = kv_unit(kv, is_v, b, h);
  switch (kv.format) {
    case KvFormat::kF32: {
      const float* x = reinterpret_cast<const float*>(unit) + size_t(r) * hd;
      for (int d = 0; d < hd; ++d) y[d] = x[d];
      return;
    }
    case KvFormat::kF16: {
      const uint16_t* x = reinterpret_cast<const uint16_t*>(unit) + size_t(r) * hd;
      for (int d = 0; d < hd; ++d) y[d] = fp16_to_fp32(x[d]);
      return;
    }
    case KvFormat::kQ8:
      q8_load_row(unit, bs, hd, r, y);
      kv_hadamard(y, hd);  // rows are stored rotated: H (H x) = x
      return;
    case KvFormat::kQ4:
    case KvFormat::kKivi2: {
      const bool rot = is_v && kv_rotates_v(kv.format);
      const bool f16 = kivi_reads_f16(qpos, j, bs, kv.kivi->residual_blocks());
      const uint16_t* x = f16 ? kivi_f16_row(kv, s, h, j, is_v) : nullptr;
      if (x != nullptr) {
        for (int d = 0; d < hd; ++d) y[d] = fp16_to_fp32(x[d]);
      } else if (!is_v) {
        kivi_k_load_row(unit, bs, hd, kv_kivi_bits(kv.format), r, y);
      } else if (rot) {
        kivi_v_load_row(unit, bs, hd, r, y);
      } else {
        q4_load_row(unit, bs, hd, r, y);
      }
      if (rot) kv_hadamard(y, hd);  // values are stored rotated: H (H v) = v
      return;
    }
    default:
      OMNIBUS_CHECK(false && "not a KvFormat");
  }
}

void kv_store_row_quantized(KvFormat t, uint8_t* unit, int bs, int hd, int r, const float* x) {
  OMNIBUS_CHECK(t == KvFormat::kQ8);
  thread_local std::vector<float> rotated;
  rotated.assign(x, x + hd);
  kv_hadamard(rotated.data(), hd);  // spreads outlier channels over the row (kv_quant.h)
  q8_store_row(unit, bs, hd, r, rotated.data());
}

}  // namespace omnibus
