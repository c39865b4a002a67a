#include "kv/kv_cache.h"

#include <utility>
#include <vector>

#include "util/check.h"

namespace omnibus {

StatusOr<std::unique_ptr<KvCache>> KvCache::create(const KvGeometry& g, int64_t n_blocks,
                                                   bool enable_prefix_caching,
                                                   KvLayerGroups groups) {
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<KvStorage> storage,
                           KvStorage::create(g, n_blocks, std::move(groups)));
  return std::unique_ptr<KvCache>(new KvCache(std::move(storage), enable_prefix_caching));
}

KvCache::KvCache(std::unique_ptr<KvStorage> storage, bool enable_prefix_caching)
    : storage_(std::move(storage)),
      manager_(int32_t(storage_->n_blocks()), storage_->geometry().block_size,
               enable_prefix_caching, storage_->groups().n_groups(),
               storage_->groups().is_hybrid() ? storage_->groups().window(1) : 0),
      has_residual_(kv_has_residual(storage_->geometry().format)),
      residual_blocks_(storage_->geometry().residual_blocks()) {
  if (has_residual_) freed_.reserve(size_t(storage_->n_blocks()));  // free() never allocates
}

void KvCache::match_prefix(const TokenView& t, int32_t max_blocks, std::vector<uint64_t>& keys,
                           PrefixMatch& out, bool need_window) const {
  manager_.match_prefix(t, max_blocks, keys, out);
  // kivi2 with a window: the new sequence reads the last residual_blocks()
  // blocks before its start in fp16, as a recomputation would.
  if (!need_window || residual_blocks_ == 0 || out.blocks.empty()) return;
  if (manager_.n_groups() == 1) {
    manager_.truncate_match(out, storage_->usable_prefix(out.blocks));
    return;
  }
  // Every group's last blocks must hold their rows; a shorter hit moves the
  // sliding groups' windows too, so match again below the failed length.
  const KvLayerGroups& groups = storage_->groups();
  while (!out.blocks.empty()) {
    bool held = storage_->holds_window_rows(out.blocks, groups.n_tensors());
    const size_t n_window = size_t(out.n_blocks() - out.window_first);
    for (int g = 1; g < groups.n_groups() && held; ++g) {
      held = storage_->holds_window_rows(
          std::span<const int32_t>(out.window).subspan(size_t(g - 1) * n_window, n_window),
          int(groups.group(g).layers.size()));
    }
    if (held) return;
    manager_.match_prefix(t, out.n_blocks() - 1, keys, out);
  }
}

int32_t KvCache::allocate_new(const PrefixMatch& m, int32_t n_new, int32_t keep_free,
                              std::vector<BlockCopy>& copies) {
  if (manager_.num_blocks_needed(m, n_new) + keep_free > manager_.n_free_blocks()) return -1;
  const int32_t seq = manager_.add_seq();
  manager_.attach_prefix(seq, m);
  OMNIBUS_CHECK(manager_.allocate_slots(seq, n_new, copies));
  return seq;
}

void KvCache::free(int32_t seq) {
  freed_.clear();
  manager_.free(seq, has_residual_ ? &freed_ : nullptr);
  release_residuals();
}

void KvCache::truncate(int32_t seq, int32_t n_tokens) {
  if (has_residual_) {
    const int32_t n = manager_.n_tokens(seq);
    OMNIBUS_CHECK(n_tokens <= n);
    if (n_tokens < n) {  // max_draft_in_block: one open block, short of its last two slots
      const int32_t bs = block_size();
      OMNIBUS_CHECK(n_tokens / bs == (n - 1) / bs && (n - 1) % bs <= bs - 3);
    }
  }
  manager_.truncate(seq, n_tokens);
}

void KvCache::slide(int32_t seq, int32_t n_computed) {
  freed_.clear();
  manager_.slide(seq, n_computed, has_residual_ ? &freed_ : nullptr);
  release_residuals();
}

void KvCache::release_residuals() {
  for (int32_t b : freed_) storage_->release_residual(b);
}

void KvCache::copy_blocks(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) storage_->copy_block(c.src, c.dst);
}

void KvCache::check_integrity() const {
  manager_.check_integrity();
  if (!has_residual_) return;
  storage_->check_residual_integrity();
  // O(slots): a pinned slot's block is held by some table.
  storage_->for_each_pinned_block(
      [this](int64_t b) { OMNIBUS_CHECK(manager_.ref_count(int32_t(b)) > 0); });
}

}  // namespace omnibus
