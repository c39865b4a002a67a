#include "kv/kv_storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kv/kv_quant.h"
#include "util/check.h"

namespace omnibus {

size_t KvGeometry::bytes_per_block() const {
  const KvUnitBytes u = kv_unit_bytes(format, block_size, head_dim);
  return size_t(n_layers) * size_t(n_kv_heads) * (u.k + u.v);
}

int KvGeometry::residual_blocks() const {
  if (!kv_has_residual(format)) return 0;
  return kv_residual_blocks >= 0 ? kv_residual_blocks : kv_default_residual_blocks(format);
}

int KvGeometry::residual_slots(int64_t n_blocks) const {
  if (!kv_has_residual(format)) return 0;
  const int64_t slots =
      kv_residual_slots >= 0 ? kv_residual_slots : 64 * (1 + int64_t(residual_blocks()));
  return int(std::min(slots, n_blocks));
}

size_t KvGeometry::residual_slot_bytes() const {
  if (!kv_has_residual(format)) return 0;
  return size_t(n_layers) * 2 * size_t(n_kv_heads) * size_t(block_size) * size_t(head_dim) * 2;
}

size_t KvGeometry::fixed_bytes(int64_t n_blocks) const {
  return size_t(residual_slots(n_blocks)) * residual_slot_bytes() + transfer_bytes();
}

StatusOr<std::unique_ptr<KvStorage>> KvStorage::create(const KvGeometry& g, int64_t n_blocks,
                                                       KvLayerGroups groups) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0 || g.block_size <= 0) {
    return Status::invalid_argument(
        "KV geometry must be positive (layers {}, kv heads {}, head dim {}, block size {})",
        g.n_layers, g.n_kv_heads, g.head_dim, g.block_size);
  }
  if (n_blocks < 1) return Status::invalid_argument("KV cache needs at least one block");
  if (groups.n_groups() == 0) groups = KvLayerGroups::uniform(g.n_layers);
  if (groups.n_tensors() != g.n_layers) {
    return Status::invalid_argument("KV layer groups use {} tensors, the geometry has {}",
                                    groups.n_tensors(), g.n_layers);
  }

  if (!kv_format_supports_head_dim(g.format, g.head_dim)) {
    return Status::invalid_argument("KV cache format {} cannot store head_dim {}",
                                    kv_format_name(g.format), g.head_dim);
  }
  if (kv_has_residual(g.format) && (g.kv_residual_slots < -1 || g.kv_residual_blocks < -1)) {
    return Status::invalid_argument("{} residual slots and window blocks must be >= 0",
                                    kv_format_name(g.format));
  }
  const size_t blocks_bytes = g.bytes_per_block() * size_t(n_blocks);
  const size_t n_bytes = blocks_bytes + g.transfer_bytes();
  // mmap gives page-aligned, zero-filled memory that is only committed when touched.
  void* mem = mmap(nullptr, n_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return Status::resource_exhausted("cannot allocate {} MiB for the KV cache", n_bytes >> 20);
  }
  return std::unique_ptr<KvStorage>(
      new KvStorage(g, std::move(groups), n_blocks, mem, blocks_bytes, n_bytes));
}

size_t KvStorage::resident_bytes() const {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t n_pages = (n_bytes_ + page - 1) / page;
  std::vector<unsigned char> in_core(n_pages);
  if (mincore(mem_, n_bytes_, in_core.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char c : in_core) n += c & 1u;
  return n * page;
}

KvStorage::KvStorage(const KvGeometry& g, KvLayerGroups groups, int64_t n_blocks, void* mem,
                     size_t blocks_bytes, size_t n_bytes)
    : geometry_(g),
      groups_(std::move(groups)),
      n_blocks_(n_blocks),
      mem_(mem),
      blocks_bytes_(blocks_bytes),
      n_bytes_(n_bytes) {
  if (g.transfer_slot_bytes() > 0) transfer_used_.assign(size_t(kKvTransferSlots), 0);
  if (kv_has_residual(g.format)) {
    kivi_staging_ = std::make_unique<KiviStaging>();
    const int slots = g.residual_slots(n_blocks);
    for (int il = 0; il < g.n_layers; ++il) {
      kivi_.push_back(std::make_unique<KiviResidual>(n_blocks, g.n_kv_heads, g.block_size,
                                                     g.head_dim, slots, kivi_staging_.get(),
                                                     g.residual_blocks()));
    }
  }
}

KvStorage::~KvStorage() { munmap(mem_, n_bytes_); }

size_t KvStorage::k_pool_bytes() const {
  return size_t(n_blocks_) * size_t(geometry_.n_kv_heads) *
         kv_unit_bytes(geometry_.format, geometry_.block_size, geometry_.head_dim).k;
}

size_t KvStorage::v_pool_bytes() const {
  return size_t(n_blocks_) * size_t(geometry_.n_kv_heads) *
         kv_unit_bytes(geometry_.format, geometry_.block_size, geometry_.head_dim).v;
}

PagedKvLayer KvStorage::tensor(int il) const {
  OMNIBUS_DCHECK(il >= 0 && il < geometry_.n_layers);
  auto* base = static_cast<uint8_t*>(mem_) + size_t(il) * (k_pool_bytes() + v_pool_bytes());
  return PagedKvLayer{geometry_.format,
                      base,
                      base + k_pool_bytes(),
                      geometry_.block_size,
                      geometry_.n_kv_heads,
                      geometry_.head_dim,
                      kivi_.empty() ? nullptr : kivi_[size_t(il)].get()};
}

uint64_t KvStorage::kivi_steals() const {
  uint64_t n = 0;
  for (const auto& r : kivi_) n += r->n_steals() + r->n_no_slot();
  return n;
}

int32_t KvStorage::usable_prefix(std::span<const int32_t> blocks) const {
  if (geometry_.residual_blocks() == 0) return int32_t(blocks.size());
  // Sequences starting after blocks[0, m) read blocks m - w .. m - 1 in fp16.
  for (size_t m = blocks.size(); m > 0; --m) {
    if (holds_window_rows(blocks.first(m), geometry_.n_layers)) return int32_t(m);
  }
  return 0;
}

bool KvStorage::holds_window_rows(std::span<const int32_t> blocks, int n_tensors) const {
  const size_t w = size_t(geometry_.residual_blocks());
  OMNIBUS_CHECK(n_tensors >= 0 && n_tensors <= int(kivi_.size()));
  for (size_t i = blocks.size() > w ? blocks.size() - w : 0; i < blocks.size(); ++i) {
    for (int t = 0; t < n_tensors; ++t) {
      if (!kivi_[size_t(t)]->holds_rows(blocks[i])) return false;
    }
  }
  return true;
}

void KvStorage::release_residual(int64_t block) {
  OMNIBUS_CHECK(block >= 0 && block < n_blocks_);
  for (const auto& r : kivi_) r->release_block(block);
}

bool KvStorage::residual_pinned(int64_t block) const {
  for (const auto& r : kivi_) {
    if (r->pins(block)) return true;
  }
  return false;
}

void KvStorage::check_residual_integrity() const {
  for (const auto& r : kivi_) r->check_integrity();
}

void KvStorage::copy_block(int64_t src, int64_t dst) {
  OMNIBUS_CHECK(src >= 0 && src < n_blocks_ && dst >= 0 && dst < n_blocks_);
  const KvUnitBytes u = kv_unit_bytes(geometry_.format, geometry_.block_size, geometry_.head_dim);
  for (int il = 0; il < geometry_.n_layers; ++il) {
    const PagedKvLayer l = layer(il);
    for (const auto& [pool, unit] : {std::pair{l.k, u.k}, std::pair{l.v, u.v}}) {
      const size_t block_bytes = size_t(geometry_.n_kv_heads) * unit;
      auto* p = static_cast<uint8_t*>(pool);
      std::memcpy(p + size_t(dst) * block_bytes, p + size_t(src) * block_bytes, block_bytes);
    }
    if (l.kivi != nullptr) kivi_copy_block(l, src, dst);
  }
}

int32_t KvStorage::claim_transfer_slot() {
  for (size_t s = 0; s < transfer_used_.size(); ++s) {
    if (!transfer_used_[s]) {
      transfer_used_[s] = 1;
      return int32_t(s);
    }
  }
  return -1;
}

void KvStorage::release_transfer_slot(int32_t slot) {
  OMNIBUS_CHECK(slot >= 0 && size_t(slot) < transfer_used_.size() && transfer_used_[size_t(slot)]);
  transfer_used_[size_t(slot)] = 0;
}

size_t KvStorage::transfer_slot_offset(int32_t slot) const {
  OMNIBUS_CHECK(slot >= 0 && size_t(slot) < transfer_used_.size());
  return blocks_bytes_ + size_t(slot) * transfer_slot_bytes();
}

bool KvStorage::export_window_rows(std::span<const int32_t> blocks, int32_t slot) const {
  OMNIBUS_CHECK(int(blocks.size()) == geometry_.residual_blocks() && slot >= 0 &&
                size_t(slot) < transfer_used_.size() && transfer_used_[size_t(slot)]);
  for (int32_t b : blocks) {
    OMNIBUS_CHECK(b >= 0 && b < n_blocks_);
    for (const auto& r : kivi_) {
      if (!r->holds_rows(b)) return false;
    }
  }
  const size_t rows_bytes = kivi_.empty() ? 0 : kivi_[0]->slot_bytes() / 2;  // K or V of one slot
  auto* out = static_cast<uint8_t*>(mem_) + transfer_slot_offset(slot);
  for (int32_t b : blocks) {
    for (const auto& r : kivi_) {
      for (bool is_v : {false, true}) {
        std::memcpy(out, r->row(r->slot_of(b), is_v, 0, 0), rows_bytes);
        out += rows_bytes;
      }
    }
  }
  return true;
}

bool KvStorage::import_window_rows(std::span<const int32_t> blocks, int32_t slot) {
  OMNIBUS_CHECK(int(blocks.size()) == geometry_.residual_blocks() && slot >= 0 &&
                size_t(slot) < transfer_used_.size() && transfer_used_[size_t(slot)]);
  const size_t rows_bytes = kivi_.empty() ? 0 : kivi_[0]->slot_bytes() / 2;
  const size_t rows_elems = rows_bytes / sizeof(uint16_t);
  const auto* in = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(mem_) +
                                                     transfer_slot_offset(slot));
  bool all = true;
  for (int32_t b : blocks) {
    OMNIBUS_CHECK(b >= 0 && b < n_blocks_);
    for (const auto& r : kivi_) {
      all = r->adopt_rows(b, in, in + rows_elems) && all;
      in += 2 * rows_elems;
    }
  }
  return all;
}

}  // namespace omnibus
