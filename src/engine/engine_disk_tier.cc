// The engine's side of the prefix cache's disk tier (docs/disk-tier.md):
// loading a new request's prompt blocks from disk into the pool (its KvLoad,
// run by engine_kv_load.cc), and storing finished requests' blocks and the
// pool's evicted blocks to disk.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/kv_load.h"
#include "engine/sequence.h"
#include "kv/disk_tier.h"
#include "kv/kv_block_io.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "util/check.h"

namespace omnibus {

namespace {

// The tokens of block b of `seq` (block_size bs).
std::vector<int32_t> block_tokens(const Sequence& seq, int32_t b, int32_t bs) {
  std::vector<int32_t> t(static_cast<size_t>(bs));
  for (int32_t j = 0; j < bs; ++j) t[size_t(j)] = seq.token_at(b * bs + j);
  return t;
}

// The hash-chain key block b of `seq` continues from (its root for block 0).
uint64_t parent_key(const Sequence& seq, std::span<const uint64_t> keys, int32_t b) {
  return b == 0 ? seq.cache_root : keys[size_t(b - 1)];
}

// The disk tier's KvLoad (kv_load.h): the prompt's blocks after the pool's
// prefix hit that are on disk, read on the tier's I/O thread and scattered
// into the hold's blocks on the engine thread.
class DiskKvLoad final : public KvLoad {
 public:
  DiskKvLoad(Engine::Impl& e, Sequence& seq) : e_(e), seq_(seq) {}

  bool lookup(Plan& plan) override {
    if (!e_.disk->enabled() || !seq_.may_use_cached_prefix) return false;
    const int32_t bs = e_.config.block_size;
    // The last prompt token is always computed (its logits are sampled).
    const int32_t max_blocks = (seq_.num_tokens() - 1) / bs;
    if (max_blocks <= 0) return false;
    e_.kv.match_prefix(seq_.tokens(), max_blocks, seq_.block_keys, plan.match);
    n_local_ = plan.match.n_blocks();
    if (n_local_ == max_blocks) return false;
    e_.kv.extend_keys(seq_.tokens(), max_blocks, seq_.block_keys);
    const std::span<const uint64_t> keys(seq_.block_keys.data(), size_t(max_blocks));
    n_disk_ = e_.disk->lookup(keys.subspan(size_t(n_local_)));
    plan.n_blocks = n_local_ + n_disk_;
    // Loading is optional (the request can compute the blocks): it never
    // takes the pool below the scheduler's admission watermark.
    plan.keep_free = e_.kv.n_blocks() / 100;
    return n_disk_ > 0;
  }

  void abort() override {}

  void start(std::vector<int32_t> dst, std::function<void(bool ok)> done) override {
    OMNIBUS_CHECK(int32_t(dst.size()) == n_disk_);
    const int32_t bs = e_.config.block_size;
    const std::span<const uint64_t> keys(seq_.block_keys);
    std::vector<DiskLoadItem> items(static_cast<size_t>(n_disk_));
    for (int32_t i = 0; i < n_disk_; ++i) {
      const int32_t b = n_local_ + i;
      DiskLoadItem& it = items[size_t(i)];
      it.key = keys[size_t(b)];
      it.parent = parent_key(seq_, keys, b);
      it.tokens = block_tokens(seq_, b, bs);
    }
    load_ = e_.disk->request_load(std::move(items), [done = std::move(done)] { done(true); });
    ++e_.local.kv_disk_loads;
  }

  int32_t finish(bool ok, std::span<const int32_t> table) override {
    OMNIBUS_CHECK(load_->done());
    const int32_t n = ok ? std::min(load_->n_loaded(), n_disk_) : 0;
    for (int32_t i = 0; i < n; ++i) {
      scatter_kv_block(e_.kv.storage(), table[size_t(n_local_ + i)], load_->payload(i));
    }
    e_.local.kv_disk_hit_blocks += uint64_t(n);
    e_.local.kv_disk_hit_tokens += uint64_t(n) * uint64_t(e_.config.block_size);
    return n > 0 ? n_local_ + n : 0;
  }

 private:
  Engine::Impl& e_;
  Sequence& seq_;
  int32_t n_local_ = 0;
  int32_t n_disk_ = 0;
  std::shared_ptr<const DiskLoad> load_;
};

}  // namespace

std::unique_ptr<KvLoad> Engine::Impl::make_disk_load(RequestState& r) {
  if (disk == nullptr) return nullptr;
  return std::make_unique<DiskKvLoad>(*this, *r.seqs[0]);
}

// Queues the full blocks of `seq` (its K/V written) that the disk tier does
// not hold yet: a memcpy each on this thread, the write on the tier's.
void Engine::Impl::store_finished(Sequence& seq) {
  if (disk == nullptr || !config.kv_offload_finished || seq.kv_seq < 0 || !kv.prefix_caching())
    return;
  const int32_t bs = config.block_size;
  const int32_t n_full = std::min(kv.n_tokens(seq.kv_seq), seq.num_computed_tokens) / bs;
  if (n_full <= 0) return;
  std::vector<uint64_t>& keys = seq.block_keys;
  kv.extend_keys(seq.tokens(), n_full, keys);
  const std::span<const int32_t> table = kv.block_table(seq.kv_seq);
  for (int32_t i = 0; i < n_full; ++i) {
    const uint64_t key = keys[size_t(i)];
    if (disk->contains(key)) continue;
    DiskBlock b{key, parent_key(seq, keys, i), block_tokens(seq, i, bs), {}};
    if (store_block(std::move(b), table[size_t(i)])) ++local.kv_disk_stored_finished;
  }
}

// Writes the blocks the pool just took back out of the prefix cache (still
// holding their K/V: nothing has written into them yet) to the disk tier,
// unless it holds them already.
void Engine::Impl::spill_evicted() {
  if (evicted.empty()) return;
  for (PrefixCache::Evicted& e : evicted) {
    if (disk->contains(e.key)) continue;
    DiskBlock b{e.key, e.parent_key, std::move(e.tokens), {}};
    if (store_block(std::move(b), e.block)) ++local.kv_disk_stored_evicted;
  }
  evicted.clear();
}

// Gathers pool block `block`'s K/V into b's payload and queues b for the
// disk tier's writer; false when the tier did not take it.
bool Engine::Impl::store_block(DiskBlock b, int32_t block) {
  b.payload.resize(kv_block_payload_bytes(kv.storage()));
  gather_kv_block(kv.storage(), block, b.payload);
  return disk->store(std::move(b));
}

}  // namespace omnibus
