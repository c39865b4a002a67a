#include "kv/kv_block_io.h"

#include <cstring>

#include "util/check.h"

namespace omnibus {

bool kv_block_io_supported(const KvGeometry& g) { return g.residual_slot_bytes() == 0; }

size_t kv_block_payload_bytes(const KvStorage& kv) {
  return size_t(kv.geometry().n_layers) * (kv.k_block_bytes() + kv.v_block_bytes());
}

void gather_kv_block(const KvStorage& kv, int32_t block, std::span<uint8_t> dst) {
  OMNIBUS_CHECK(block >= 0 && block < kv.n_blocks() && dst.size() == kv_block_payload_bytes(kv));
  const auto* base = static_cast<const uint8_t*>(kv.region());
  const size_t kb = kv.k_block_bytes(), vb = kv.v_block_bytes();
  uint8_t* out = dst.data();
  for (int il = 0; il < kv.geometry().n_layers; ++il) {
    std::memcpy(out, base + kv.k_offset(il) + size_t(block) * kb, kb);
    out += kb;
    std::memcpy(out, base + kv.v_offset(il) + size_t(block) * vb, vb);
    out += vb;
  }
}

void scatter_kv_block(KvStorage& kv, int32_t block, std::span<const uint8_t> src) {
  OMNIBUS_CHECK(block >= 0 && block < kv.n_blocks() && src.size() == kv_block_payload_bytes(kv));
  OMNIBUS_CHECK(kv_block_io_supported(kv.geometry()));
  auto* base = static_cast<uint8_t*>(kv.region());
  const size_t kb = kv.k_block_bytes(), vb = kv.v_block_bytes();
  const uint8_t* in = src.data();
  for (int il = 0; il < kv.geometry().n_layers; ++il) {
    std::memcpy(base + kv.k_offset(il) + size_t(block) * kb, in, kb);
    in += kb;
    std::memcpy(base + kv.v_offset(il) + size_t(block) * vb, in, vb);
    in += vb;
  }
}

}  // namespace omnibus
