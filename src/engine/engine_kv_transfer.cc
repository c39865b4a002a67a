// KV transfer between workers (disaggregated prefill/decode): importing a
// request's prompt blocks fetched from a prefill worker (KvImport), and
// pinning a finished prompt's blocks for a decode worker (KvPinned) until
// unpin.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/request.h"
#include "engine/sequence.h"
#include "kv/kv_cache.h"
#include "kv/kv_storage.h"
#include "kv/prefix_cache.h"
#include "util/check.h"

namespace omnibus {

// Matches the prompt's importable blocks against the prefix cache and fetches
// the rest into blocks reserved by a holding sequence; the request waits
// outside the scheduler until end_import. When nothing needs fetching, or the
// pool cannot spare the blocks, it is scheduled at once (computing what it
// lacks itself).
void Engine::Impl::start_import(RequestState& r) {
  Sequence& seq = *r.seqs[0];
  KvImport& im = *r.req.kv_import;
  ++local.kv_imports;
  // The last prompt token is always computed here (its logits are sampled).
  const int32_t n_want = std::min(im.n_blocks, (seq.num_prompt_tokens() - 1) / config.block_size);
  PrefixMatch match;
  if (kv.prefix_caching()) kv.match_prefix(seq.tokens(), n_want, seq.block_keys, match);
  // kivi2 with a window: the fetched blocks need their fp16 window rows too
  // (else admission cuts the hit back), staged in a transfer slot; the
  // source exported those of its last W blocks (pin_prompt). With them, any
  // cached run is usable as it is: only the rows where the hit ends matter,
  // and those come along. A run that reaches n_want but lacks them needs
  // the rows alone (refetched blocks would only duplicate cached ones).
  const int32_t w = kv.storage().geometry().residual_blocks();
  int32_t transfer_slot = -1;
  bool rows_only = false;
  if (w > 0 && match.n_blocks() < n_want && n_want == im.n_blocks && n_want >= w) {
    transfer_slot = kv.storage().claim_transfer_slot();
    PrefixMatch raw;
    if (transfer_slot >= 0)
      kv.match_prefix(seq.tokens(), n_want, seq.block_keys, raw, /*need_window=*/false);
    if (raw.n_blocks() > match.n_blocks()) match = std::move(raw);
    rows_only = transfer_slot >= 0 && match.n_blocks() == n_want;
  }
  const int32_t n_local = match.n_blocks();
  const bool short_of_rows = n_local < n_want || rows_only;
  int32_t hold = -1;
  if (short_of_rows && kv.prefix_caching() && (w == 0 || transfer_slot >= 0)) {
    std::vector<BlockCopy> copies;
    hold = kv.allocate_new(match, (n_want - n_local) * config.block_size, /*keep_free=*/0, copies);
    OMNIBUS_CHECK(copies.empty());  // a match ends on a full block: nothing is shared and open
  }
  if (hold < 0) {
    if (transfer_slot >= 0) kv.storage().release_transfer_slot(transfer_slot);
    local.kv_import_blocks_local += uint64_t(n_local);
    if (short_of_rows) ++local.kv_import_fallbacks;
    im.finished(n_local, 0, short_of_rows);
    scheduler.add(&seq);
    return;
  }
  spill_evicted();  // before the fetch overwrites what the hold took
  const std::span<const int32_t> table = kv.block_table(hold);
  std::vector<int32_t> dst(table.begin() + n_local, table.end());
  importing[r.id] = ImportState{hold, n_local, n_want, transfer_slot};
  r.importing = true;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++imports_in_flight;
  }
  const uint64_t id = r.id;
  const int64_t window_dst =
      transfer_slot >= 0 ? int64_t(kv.storage().transfer_slot_offset(transfer_slot)) : -1;
  im.fetch(n_local, std::move(dst), window_dst, [this, id](bool ok) {
    // Notified under the lock: once the engine sees the count drop it may be
    // destroyed, so nothing here may touch it after the unlock.
    std::lock_guard<std::mutex> lock(mu);
    imports_done.emplace_back(id, ok);
    --imports_in_flight;
    cv.notify_all();
  });
}

// The fetch of request `id` ended: on success its blocks join the prefix
// cache (as if computed here), then the request is scheduled; its admission
// finds them. The holding sequence lets go first: the blocks wait in the free
// list's most recently freed end, which allocation reaches last.
void Engine::Impl::end_import(uint64_t id, bool ok) {
  auto it = importing.find(id);
  OMNIBUS_CHECK(it != importing.end());
  const ImportState im = it->second;
  importing.erase(it);
  RequestState& r = *requests.at(id);
  Sequence& seq = *r.seqs[0];
  r.importing = false;
  const int32_t n_fetched = im.n_blocks - im.n_local;
  if (ok && im.transfer_slot >= 0) {
    // The window rows landed in the transfer slot: give them to the last W
    // blocks before they join the prefix cache, so admission's match_prefix
    // (usable_prefix) takes all n_blocks. Nothing claims residual slots
    // between here and the request's admission but other imports' rows and
    // steps' kv_store calls, exactly as for a local prefix-cache hit.
    const std::span<const int32_t> table = kv.block_table(im.hold);
    const int32_t w = kv.storage().geometry().residual_blocks();
    ok = kv.storage().import_window_rows(table.subspan(size_t(im.n_blocks - w), size_t(w)),
                                         im.transfer_slot);
  }
  if (im.transfer_slot >= 0) kv.storage().release_transfer_slot(im.transfer_slot);
  if (ok) {
    kv.commit(im.hold, seq.tokens(), im.n_blocks * config.block_size, seq.block_keys);
    seq.num_imported_tokens = n_fetched * config.block_size;
    local.kv_import_blocks_fetched += uint64_t(n_fetched);
  } else {
    ++local.kv_import_fallbacks;
  }
  local.kv_import_blocks_local += uint64_t(im.n_local);
  kv.free(im.hold);
  r.req.kv_import->finished(im.n_local, ok ? n_fetched : 0, !ok);
  scheduler.add(&seq);
  if (r.abort_after_import) abort_request(id);
}

// Keeps the prompt's full blocks but the one holding its last token (a
// decode worker computes that one itself) in a sequence of their own.
void Engine::Impl::pin_prompt(RequestState& r, Sequence& seq0) {
  if (seq0.kv_seq < 0) return;
  const int32_t n = std::min((seq0.num_prompt_tokens() - 1) / config.block_size,
                             kv.n_tokens(seq0.kv_seq) / config.block_size);
  auto pinned = std::make_shared<KvPinned>();
  pinned->pin_id = next_pin_id++;
  const std::span<const int32_t> table = kv.block_table(seq0.kv_seq);
  pinned->blocks.assign(table.begin(), table.begin() + n);
  std::vector<uint64_t> keys;
  // --kv-transfer-max-pinned: beyond it the request is served without an
  // offer (the decode worker computes the prompt).
  int64_t pinned_blocks = 0;
  for (const auto& [id, p] : pins) pinned_blocks += p.n_blocks;
  if (config.max_pinned_blocks >= 0 && pinned_blocks + n > config.max_pinned_blocks) {
    ++local.kv_pins_refused;
    return;
  }
  uint64_t parent = seq0.cache_root;
  const std::vector<int32_t>& prompt = r.req.prompt;
  for (int32_t i = 0; i < n; ++i) {
    parent = PrefixCache::chain_key(
        std::span<const int32_t>(prompt.data() + size_t(i) * size_t(config.block_size),
                                 size_t(config.block_size)),
        parent);
    pinned->keys.push_back(parent);
  }
  Pin pin{-1, n, -1};
  if (!export_window(pinned->blocks, pin.transfer_slot)) {
    pin.n_blocks = 0;  // the decode worker computes the prompt itself
    pinned->blocks.clear();
    pinned->keys.clear();
  }
  if (pin.transfer_slot >= 0) {
    pinned->window_offset = int64_t(kv.storage().transfer_slot_offset(pin.transfer_slot));
    pinned->window_bytes = kv.storage().transfer_slot_bytes();
  }
  pin.seq = kv.share_prefix(seq0.kv_seq, pin.n_blocks);
  pins[pinned->pin_id] = pin;
  r.pinned = std::move(pinned);
}

// kivi2 with a window of W blocks: exports the fp16 window rows of the last W
// of `blocks` into a transfer slot claimed into `slot`. True when there is
// nothing to export (no window, no blocks); false, with no slot held, when
// there are fewer than W blocks, no slot is free or some layer lost the rows
// (then the blocks are worth nothing to a decode worker: it could not start
// after them).
bool Engine::Impl::export_window(std::span<const int32_t> blocks, int32_t& slot) {
  slot = -1;
  KvStorage& st = kv.storage();
  const int32_t w = st.geometry().residual_blocks();
  if (w == 0 || blocks.empty()) return true;
  if (int32_t(blocks.size()) < w) return false;
  slot = st.claim_transfer_slot();
  if (slot < 0) return false;
  if (st.export_window_rows(blocks.subspan(blocks.size() - size_t(w)), slot)) return true;
  st.release_transfer_slot(slot);
  slot = -1;
  return false;
}

void Engine::Impl::unpin(uint64_t pin_id) {
  auto it = pins.find(pin_id);
  if (it == pins.end()) return;
  kv.free(it->second.seq);
  if (it->second.transfer_slot >= 0) kv.storage().release_transfer_slot(it->second.transfer_slot);
  pins.erase(it);
}

}  // namespace omnibus
