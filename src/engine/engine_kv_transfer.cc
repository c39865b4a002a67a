// KV transfer between workers (disaggregated prefill/decode): importing a
// request's prompt blocks fetched from a prefill worker (KvImport, through
// its KvLoad, run by engine_kv_load.cc), and pinning a finished prompt's
// blocks for a decode worker (KvPinned) until unpin.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/kv_load.h"
#include "engine/request.h"
#include "engine/sequence.h"
#include "kv/kv_cache.h"
#include "kv/kv_storage.h"
#include "kv/prefix_cache.h"
#include "util/check.h"

namespace omnibus {

namespace {

// KV transfer's KvLoad (kv_load.h): the prompt's blocks a prefill worker
// offered (KvImport), less those cached here, fetched into the hold's blocks.
class ImportKvLoad final : public KvLoad {
 public:
  ImportKvLoad(Engine::Impl& e, Sequence& seq, KvImport& im) : e_(e), seq_(seq), im_(im) {}

  bool lookup(Plan& plan) override {
    KvCache& kv = e_.kv;
    const int32_t bs = e_.config.block_size;
    ++e_.local.kv_imports;
    // The last prompt token is always computed here (its logits are sampled).
    n_want_ = std::min(im_.n_blocks, (seq_.num_prompt_tokens() - 1) / bs);
    if (kv.prefix_caching()) kv.match_prefix(seq_.tokens(), n_want_, seq_.block_keys, plan.match);
    // kivi2 with a window: the fetched blocks need their fp16 window rows too
    // (else admission cuts the hit back), staged in a transfer slot; the
    // source exported those of its last W blocks (pin_prompt). With them, any
    // cached run is usable as it is: only the rows where the hit ends matter,
    // and those come along. A run that reaches n_want but lacks them needs
    // the rows alone (refetched blocks would only duplicate cached ones).
    const int32_t w = kv.storage().geometry().residual_blocks();
    bool rows_only = false;
    if (w > 0 && plan.match.n_blocks() < n_want_ && n_want_ == im_.n_blocks && n_want_ >= w) {
      transfer_slot_ = kv.storage().claim_transfer_slot();
      PrefixMatch raw;
      if (transfer_slot_ >= 0)
        kv.match_prefix(seq_.tokens(), n_want_, seq_.block_keys, raw, /*need_window=*/false);
      if (raw.n_blocks() > plan.match.n_blocks()) plan.match = std::move(raw);
      rows_only = transfer_slot_ >= 0 && plan.match.n_blocks() == n_want_;
    }
    n_local_ = plan.match.n_blocks();
    short_of_rows_ = n_local_ < n_want_ || rows_only;
    plan.n_blocks = n_want_;
    // No watermark: the request was sent here to start after these blocks.
    plan.keep_free = 0;
    if (short_of_rows_ && kv.prefix_caching() && (w == 0 || transfer_slot_ >= 0)) return true;
    abort();  // nothing to fetch, or nowhere to put it
    return false;
  }

  // Served without a fetch: the prompt computes what it lacks.
  void abort() override {
    if (transfer_slot_ >= 0) e_.kv.storage().release_transfer_slot(transfer_slot_);
    e_.local.kv_import_blocks_local += uint64_t(n_local_);
    if (short_of_rows_) ++e_.local.kv_import_fallbacks;
    im_.finished(n_local_, 0, short_of_rows_);
  }

  void start(std::vector<int32_t> dst, std::function<void(bool ok)> done) override {
    const int64_t window_dst =
        transfer_slot_ >= 0 ? int64_t(e_.kv.storage().transfer_slot_offset(transfer_slot_)) : -1;
    im_.fetch(n_local_, std::move(dst), window_dst, std::move(done));
  }

  int32_t finish(bool ok, std::span<const int32_t> table) override {
    KvStorage& st = e_.kv.storage();
    const int32_t n_fetched = n_want_ - n_local_;
    if (ok && transfer_slot_ >= 0) {
      // The window rows landed in the transfer slot: give them to the last W
      // blocks before they join the prefix cache, so admission's match_prefix
      // (usable_prefix) takes all n_blocks. Nothing claims residual slots
      // between here and the request's admission but other imports' rows and
      // steps' kv_store calls, exactly as for a local prefix-cache hit.
      const int32_t w = st.geometry().residual_blocks();
      ok = st.import_window_rows(table.subspan(size_t(n_want_ - w), size_t(w)), transfer_slot_);
    }
    if (transfer_slot_ >= 0) st.release_transfer_slot(transfer_slot_);
    if (ok) {
      seq_.num_imported_tokens = n_fetched * e_.config.block_size;
      e_.local.kv_import_blocks_fetched += uint64_t(n_fetched);
    } else {
      ++e_.local.kv_import_fallbacks;
    }
    e_.local.kv_import_blocks_local += uint64_t(n_local_);
    im_.finished(n_local_, ok ? n_fetched : 0, !ok);
    return ok ? n_want_ : 0;
  }

 private:
  Engine::Impl& e_;
  Sequence& seq_;
  KvImport& im_;
  int32_t n_want_ = 0;          // blocks the request will start after
  int32_t n_local_ = 0;         // blocks already cached here
  int32_t transfer_slot_ = -1;  // kivi2 window: where the rows land (KvStorage transfer slot)
  bool short_of_rows_ = false;
};

}  // namespace

std::unique_ptr<KvLoad> Engine::Impl::make_import_load(RequestState& r) {
  OMNIBUS_CHECK(r.req.kv_import != nullptr);
  return std::make_unique<ImportKvLoad>(*this, *r.seqs[0], *r.req.kv_import);
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
  // --kv-transfer-max-pinned: beyond it the request is served without an
  // offer (the decode worker computes the prompt).
  int64_t pinned_blocks = 0;
  for (const auto& [id, p] : pins) pinned_blocks += p.n_blocks;
  if (config.max_pinned_blocks >= 0 && pinned_blocks + n > config.max_pinned_blocks) {
    ++local.kv_pins_refused;
    return;
  }
  pinned->keys = PrefixCache::chain_keys(r.req.prompt, n, config.block_size, seq0.cache_root);
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
