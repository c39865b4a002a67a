// The KV formats seen through a paged layer (kv/attention.h): where a
// (block, KV head) unit lives, which rows a query reads in fp16 (q4/kivi2:
// its open group and the residual window), a scalar row reader that is the
// definition of what a query at position qpos sees for key/value j, and the
// quantizing row store of q8 (q4 and kivi2 store through kivi_store).
//
// Thread-safety: kv_read_row only reads; kv_store_row_quantized writes one row
// of the unit it is given.
#pragma once

#include <cstdint>

#include "kv/attention.h"
#include "kv/kv_quant.h"

namespace omnibus {

// Start of the (block, h) unit of the K (is_v false) or V pool.
inline uint8_t* kv_unit(const PagedKvLayer& kv, bool is_v, int64_t block, int h) {
  const KvUnitBytes ub = kv_unit_bytes(kv.format, kv.block_size, kv.head_dim);
  const size_t bytes = is_v ? ub.v : ub.k;
  return static_cast<uint8_t*>(is_v ? kv.v : kv.k) + (size_t(block) * kv.n_kv_heads + h) * bytes;
}

// kivi2, q4 (kv_has_residual): a query at qpos reads keys/values j >= qlim
// from the fp16 residual, the rest from the quantized blocks. The fp16 part is
// its own still open group plus the `residual_blocks` groups completed last
// (kv_quant_kivi.h):
//   qlim(p) = max(0, floor((p + 1) / bs) - residual_blocks) * bs
// A function of (p, j) only, so chunking and batching do not change it.
inline int32_t kivi_qlim(int32_t qpos, int block_size, int residual_blocks) {
  const int32_t groups = (qpos + 1) / block_size - residual_blocks;
  return groups > 0 ? groups * block_size : 0;
}
inline bool kivi_reads_f16(int32_t qpos, int32_t j, int block_size, int residual_blocks) {
  return j >= kivi_qlim(qpos, block_size, residual_blocks);
}

// y[0..hd) = row j of KV head h of sequence s as a query at qpos sees it.
void kv_read_row(const PagedKvLayer& kv, const AttentionSeq& s, bool is_v, int32_t j, int h,
                 int32_t qpos, float* y);

// Writes one row (q8): row r of unit.
void kv_store_row_quantized(KvFormat t, uint8_t* unit, int bs, int hd, int r, const float* x);

}  // namespace omnibus
