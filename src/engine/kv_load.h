// KvLoad: one request's prompt blocks coming from outside the pool. The two
// places they come from — the disk tier (engine_disk_tier.cc, DiskKvLoad) and
// a prefill worker over KV transfer (engine_kv_transfer.cc, ImportKvLoad) —
// implement it, and the engine runs both on one path (engine_kv_load.cc):
// one map of loads in flight, one phase (SeqStatus::kWaitingForKv), one
// completion message (KvLoadDone in the engine's inbox).
//
// A request's first sequence, from accept to the scheduler:
//
//   accept ── lookup() false ─────────────────────────────────────> kWaiting
//     │ true: blocks [plan.match.n_blocks(), plan.n_blocks) to load
//     ├── no hold (pool short) ── abort() ────────────────────────> kWaiting
//     └── hold reserved ── start(dst, done) ──> kWaitingForKv
//                               done(ok), any thread: KvLoadDone(id, ok)
//         finish(ok, table) -> valid blocks ── commit, free hold ──> kWaiting
//
// The hold is a KvCache sequence owning the matched blocks plus `dst`; the
// blocks finish() reports valid join the prefix cache, so admission finds
// them exactly as after a local prefix-cache hit (same outputs as computing
// them). An abort while kWaitingForKv waits for finish (the blocks are being
// written).
//
// Thread-safety: every method runs on the engine thread; only the `done`
// callback passed to start() is called from another thread (once).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"  // PrefixMatch

namespace omnibus {

class KvLoad {
 public:
  struct Plan {
    PrefixMatch match;      // the prompt's blocks cached here (the hold shares them)
    int32_t n_blocks = 0;   // the request starts after this many full blocks
    int32_t keep_free = 0;  // the hold may not leave fewer free blocks than this
  };

  virtual ~KvLoad() = default;

  // Fills `plan`; false when there is nothing to load (the request is
  // scheduled at once, computing what it lacks). Side effects of a true
  // answer are undone by abort() or finish().
  virtual bool lookup(Plan& plan) = 0;
  // After lookup() said true but the pool could not reserve the hold.
  virtual void abort() = 0;
  // Starts writing blocks [plan.match.n_blocks(), plan.n_blocks) into `dst`
  // (pool blocks reserved for them, in order); done(ok) exactly once, from any
  // thread, after the last byte landed or the load failed.
  virtual void start(std::vector<int32_t> dst, std::function<void(bool ok)> done) = 0;
  // After done(ok): completes the load into the hold's blocks (`table`, all
  // plan.n_blocks) and returns how many of them, from the first, hold valid
  // K/V (at least the matched ones).
  virtual int32_t finish(bool ok, std::span<const int32_t> table) = 0;
};

}  // namespace omnibus
