// KV block I/O: one block's bytes across every layer as one payload, in the
// stored format (no conversion), for the disk tier (kv/disk_tier.h). The
// payload is, for each layer l in order, the block's K bytes then its V bytes
// (KvStorage::k_block_bytes / v_block_bytes, at k_offset(l) / v_offset(l)):
//
//   [ K(0) | V(0) | K(1) | V(1) | ... | K(L-1) | V(L-1) ]
//
// Formats whose blocks are not self-contained are not covered: q4 and kivi2
// keep fp16 residual rows outside the blocks (kv/kv_quant_kivi.h), which a
// later prefix hit needs, so their blocks cannot be moved alone.
//
// Thread-safety: plain memory copies; the caller owns the storage (the engine
// thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kv/kv_storage.h"

namespace omnibus {

// Whether a block of this geometry is self-contained (every format but the
// ones with a residual: q4, kivi2).
bool kv_block_io_supported(const KvGeometry& g);
// Payload bytes of one block: n_layers * (k_block_bytes + v_block_bytes).
size_t kv_block_payload_bytes(const KvStorage& kv);
// Copies block `block`'s bytes into `dst`. REQUIRES: dst.size() == payload bytes.
void gather_kv_block(const KvStorage& kv, int32_t block, std::span<uint8_t> dst);
// Overwrites block `block` with `src` (a gather's payload). REQUIRES:
// src.size() == payload bytes, kv_block_io_supported.
void scatter_kv_block(KvStorage& kv, int32_t block, std::span<const uint8_t> src);

}  // namespace omnibus
