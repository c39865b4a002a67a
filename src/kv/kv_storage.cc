#include "kv/kv_storage.h"

#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "util/check.h"

namespace omnibus {

size_t KvGeometry::bytes_per_token() const {
  return 2 * size_t(n_layers) * size_t(n_kv_heads) * dtype_row_size(dtype, head_dim);
}

StatusOr<DType> parse_kv_dtype(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  return Status::invalid_argument("unknown KV cache dtype '{}' (choices: f16, f32)", name);
}

StatusOr<std::unique_ptr<KvStorage>> KvStorage::create(const KvGeometry& g, int64_t n_blocks) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0 || g.block_size <= 0) {
    return Status::invalid_argument("KV geometry must be positive (layers {}, kv heads {}, head dim {}, block size {})",
                                    g.n_layers, g.n_kv_heads, g.head_dim, g.block_size);
  }
  if (n_blocks < 1) return Status::invalid_argument("KV cache needs at least one block");
  const size_t n_bytes = g.bytes_per_block() * size_t(n_blocks);
  // mmap gives page-aligned, zero-filled memory that is only committed when touched.
  void* mem = mmap(nullptr, n_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return Status::resource_exhausted("cannot allocate {} MiB for the KV cache", n_bytes >> 20);
  }
  return std::unique_ptr<KvStorage>(new KvStorage(g, n_blocks, mem, n_bytes));
}

KvStorage::KvStorage(const KvGeometry& g, int64_t n_blocks, void* mem, size_t n_bytes)
    : geometry_(g), n_blocks_(n_blocks), mem_(mem), n_bytes_(n_bytes) {}

KvStorage::~KvStorage() { munmap(mem_, n_bytes_); }

size_t KvStorage::layer_half_bytes() const {
  return size_t(n_blocks_) * size_t(geometry_.n_kv_heads) * size_t(geometry_.block_size) *
         dtype_row_size(geometry_.dtype, geometry_.head_dim);
}

PagedKvLayer KvStorage::layer(int il) const {
  OMNIBUS_DCHECK(il >= 0 && il < geometry_.n_layers);
  auto* base = static_cast<uint8_t*>(mem_) + 2 * size_t(il) * layer_half_bytes();
  return PagedKvLayer{geometry_.dtype, base, base + layer_half_bytes(), geometry_.block_size,
                      geometry_.n_kv_heads, geometry_.head_dim};
}

void KvStorage::copy_block(int64_t src, int64_t dst) {
  OMNIBUS_CHECK(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_);
  const size_t block_bytes = size_t(geometry_.n_kv_heads) * size_t(geometry_.block_size) *
                             dtype_row_size(geometry_.dtype, geometry_.head_dim);
  for (int il = 0; il < geometry_.n_layers; ++il) {
    const PagedKvLayer l = layer(il);
    for (void* pool : {l.k, l.v}) {
      auto* p = static_cast<uint8_t*>(pool);
      std::memcpy(p + size_t(dst) * block_bytes, p + size_t(src) * block_bytes, block_bytes);
    }
  }
}

}  // namespace omnibus
