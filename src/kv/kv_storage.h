// KvStorage: the memory that holds every layer's keys and values, carved into
// fixed-size blocks of `block_size` token slots. It is allocated once, at
// start-up, page-aligned, and never grows: the number of blocks is what limits
// how many tokens the engine can hold (PagedAttention).
//
// Layout, per layer and for K and V separately (see kernels/attention.h):
//   [n_blocks, n_kv_heads, block_size, head_dim]  elements of `dtype`
// KvStorage knows nothing about which block belongs to whom: that is the block
// manager's job (kv/block_pool.h); the model only sees block tables.
//
// Thread-safety: the storage itself is plain memory. The engine thread owns
// it; kernels write the slots named by the step's block tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "util/status.h"

namespace omnibus {

struct KvGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  DType dtype = DType::F16;

  // Bytes one token occupies across all layers, K and V.
  size_t bytes_per_token() const;
  size_t bytes_per_block() const { return bytes_per_token() * size_t(block_size); }
};

// Accepts "f32", "f16"; returns a Status naming the choices otherwise.
StatusOr<DType> parse_kv_dtype(const std::string& name);

class KvStorage {
 public:
  // Allocates n_blocks blocks (zero-filled). REQUIRES: n_blocks >= 1.
  static StatusOr<std::unique_ptr<KvStorage>> create(const KvGeometry& g, int64_t n_blocks);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  const KvGeometry& geometry() const { return geometry_; }
  int64_t n_blocks() const { return n_blocks_; }
  size_t n_bytes() const { return n_bytes_; }

  // The K/V pools of one layer, as the attention kernels take them.
  PagedKvLayer layer(int il) const;

  // Copies every layer's slots of block `src` into block `dst` (copy-on-write).
  void copy_block(int64_t src, int64_t dst);

 private:
  KvStorage(const KvGeometry& g, int64_t n_blocks, void* mem, size_t n_bytes);
  size_t layer_half_bytes() const;  // bytes of one layer's K (or V) pool

  const KvGeometry geometry_;
  const int64_t n_blocks_;
  void* const mem_;
  const size_t n_bytes_;
};

}  // namespace omnibus
