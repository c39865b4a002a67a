// The engine's one path for KV blocks that come from outside the pool
// (kv_load.h): a request's load is started at accept and ended when its
// KvLoadDone message arrives; the disk tier and KV transfer differ only in
// their KvLoad.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/kv_load.h"
#include "engine/sequence.h"
#include "kv/kv_cache.h"
#include "util/check.h"

namespace omnibus {

// Reserves the blocks the request's load writes (a holding sequence over the
// prefix hit) and starts it; the request waits outside the scheduler
// (others keep running) until end_kv_load. False, changing nothing, when
// there is nothing to load or the pool cannot spare the blocks: the request
// is then scheduled at once and computes what it lacks.
bool Engine::Impl::start_kv_load(RequestState& r) {
  std::unique_ptr<KvLoad> load =
      r.req.kv_import != nullptr ? make_import_load(r) : make_disk_load(r);
  KvLoad::Plan plan;
  if (load == nullptr || !load->lookup(plan)) return false;
  const int32_t n_local = plan.match.n_blocks();
  OMNIBUS_CHECK(plan.n_blocks >= n_local);
  std::vector<BlockCopy> copies;
  const int32_t hold = kv.allocate_new(plan.match, (plan.n_blocks - n_local) * config.block_size,
                                       plan.keep_free, copies);
  if (hold < 0) {
    load->abort();
    return false;
  }
  OMNIBUS_CHECK(copies.empty());  // a match ends on a full block: nothing is shared and open
  spill_evicted();                // before the load overwrites what the hold took
  const std::span<const int32_t> table = kv.block_table(hold);
  std::vector<int32_t> dst(table.begin() + n_local, table.end());
  {
    std::lock_guard<std::mutex> lock(mu);
    ++kv_loads_in_flight;
  }
  r.seqs[0]->status = SeqStatus::kWaitingForKv;
  KvLoad& started = *load;
  kv_loads[r.id] = KvLoadState{hold, std::move(load)};
  const uint64_t id = r.id;
  started.start(std::move(dst), [this, id](bool ok) {
    // Posted and notified under the lock: once the engine sees the count
    // drop it may be destroyed, so nothing here may touch it after the unlock.
    std::lock_guard<std::mutex> lock(mu);
    inbox.emplace_back(KvLoadDone{id, ok});
    --kv_loads_in_flight;
    cv.notify_all();
  });
  return true;
}

// The load of request `id` ended: its valid blocks join the prefix cache (as
// if computed here), the hold lets go of them (they wait at the free list's
// most recently freed end, which allocation reaches last), and the request
// is scheduled; its admission finds them. Blocks that did not load are
// computed.
void Engine::Impl::end_kv_load(uint64_t id, bool ok) {
  auto it = kv_loads.find(id);
  OMNIBUS_CHECK(it != kv_loads.end());
  KvLoadState st = std::move(it->second);
  kv_loads.erase(it);
  RequestState& r = *requests.at(id);
  Sequence& seq = *r.seqs[0];
  OMNIBUS_CHECK(seq.status == SeqStatus::kWaitingForKv);
  const int32_t valid = st.load->finish(ok, kv.block_table(st.hold));
  if (valid > 0) kv.commit(st.hold, seq.tokens(), valid * config.block_size, seq.block_keys);
  kv.free(st.hold);
  scheduler.add(&seq);  // kWaiting
  if (r.abort_when_loaded) abort_request(id);
}

}  // namespace omnibus
