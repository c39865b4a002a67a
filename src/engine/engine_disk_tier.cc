// The engine's side of the prefix cache's disk tier (docs/disk-tier.md):
// loading a new request's prompt blocks from disk into the pool, and storing
// finished requests' blocks and the pool's evicted blocks to disk.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
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

}  // namespace

// The disk tier's read path. The prompt's blocks after the pool's prefix hit
// that are on disk are read on the tier's I/O thread into blocks reserved by
// a holding sequence; the request waits outside the scheduler (others keep
// running) until end_disk_load. False, changing nothing, when there is no
// such block or the pool cannot spare the blocks: the request is scheduled
// at once and computes what it lacks.
bool Engine::Impl::start_disk_load(RequestState& r) {
  Sequence& seq = *r.seqs[0];
  if (disk == nullptr || !disk->enabled() || !seq.may_use_cached_prefix) return false;
  const int32_t bs = config.block_size;
  // The last prompt token is always computed (its logits are sampled).
  const int32_t max_blocks = (seq.num_tokens() - 1) / bs;
  if (max_blocks <= 0) return false;
  PrefixMatch match;
  kv.match_prefix(seq.tokens(), max_blocks, seq.block_keys, match);
  const int32_t n_local = match.n_blocks();
  if (n_local == max_blocks) return false;
  kv.extend_keys(seq.tokens(), max_blocks, seq.block_keys);
  const std::span<const uint64_t> keys(seq.block_keys.data(), size_t(max_blocks));
  const int32_t n_disk = disk->lookup(keys.subspan(size_t(n_local)));
  if (n_disk == 0) return false;
  std::vector<BlockCopy> copies;
  const int32_t hold =
      kv.allocate_new(match, n_disk * bs, /*keep_free=*/kv.n_blocks() / 100, copies);
  if (hold < 0) return false;
  OMNIBUS_CHECK(copies.empty());  // a match ends on a full block: nothing is shared and open
  spill_evicted();                // before the scatter overwrites what the hold took
  std::vector<DiskLoadItem> items(static_cast<size_t>(n_disk));
  for (int32_t i = 0; i < n_disk; ++i) {
    const int32_t b = n_local + i;
    DiskLoadItem& it = items[size_t(i)];
    it.key = keys[size_t(b)];
    it.parent = parent_key(seq, keys, b);
    it.tokens = block_tokens(seq, b, bs);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ++disk_loads_in_flight;
  }
  const uint64_t id = r.id;
  // on_done runs on the tier's I/O thread: hand the id over and wake the
  // engine (notified under the lock: see start_import).
  std::shared_ptr<const DiskLoad> load = disk->request_load(std::move(items), [this, id] {
    std::lock_guard<std::mutex> lock(mu);
    disk_loads_done.push_back(id);
    --disk_loads_in_flight;
    cv.notify_all();
  });
  disk_loading[id] = DiskLoadState{hold, n_local, n_disk, std::move(load)};
  r.disk_loading = true;
  ++local.kv_disk_loads;
  return true;
}

// The load of request `id` is done: the blocks read join the prefix cache (as
// if computed here), the hold lets go of them (they wait at the free list's
// most recently used end), and the request is scheduled; its admission finds
// them. Blocks that did not load are computed.
void Engine::Impl::end_disk_load(uint64_t id) {
  auto it = disk_loading.find(id);
  OMNIBUS_CHECK(it != disk_loading.end());
  const DiskLoadState st = std::move(it->second);
  disk_loading.erase(it);
  RequestState& r = *requests.at(id);
  Sequence& seq = *r.seqs[0];
  r.disk_loading = false;
  OMNIBUS_CHECK(st.load->done());
  const int32_t n = std::min(st.load->n_loaded(), st.n_disk);
  const std::span<const int32_t> table = kv.block_table(st.hold);
  for (int32_t i = 0; i < n; ++i) {
    scatter_kv_block(kv.storage(), table[size_t(st.n_local + i)], st.load->payload(i));
  }
  if (n > 0) kv.commit(st.hold, seq.tokens(), (st.n_local + n) * config.block_size, seq.block_keys);
  local.kv_disk_hit_blocks += uint64_t(n);
  local.kv_disk_hit_tokens += uint64_t(n) * uint64_t(config.block_size);
  kv.free(st.hold);
  scheduler.add(&seq);
  if (r.abort_after_import) abort_request(id);
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
