// A request's life on the engine thread: taken in (accept: imported, loaded
// from disk or scheduled), its sequences forked after the prompt, each
// sequence finished, and requests aborted.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/request.h"
#include "engine/sequence.h"

namespace omnibus {

void Engine::Impl::accept(std::unique_ptr<RequestState> r) {
  const uint64_t id = r->id;
  RequestState& state = *r;
  requests.emplace(id, std::move(r));
  if (state.req.kv_import != nullptr) {
    start_import(state);
  } else if (!start_disk_load(state)) {
    scheduler.add(state.seqs[0].get());
  }
}

void Engine::Impl::finish(Sequence& seq, FinishReason reason, EngineEvent& event) {
  RequestState& r = *seq.request;
  if (r.req.pin_prompt_blocks && seq.index == 0 && reason != FinishReason::kAbort)
    pin_prompt(r, seq);
  store_finished(seq);
  scheduler.finish(&seq);
  event.finish = reason;
  if (++r.n_finished == r.req.n) {
    event.final = true;
    event.pinned = r.pinned;
    done_requests.push_back(r.id);
    ++local.n_requests_finished;
  }
}

void Engine::Impl::finish_embedding(Sequence& seq, const float* v, Clock::time_point now) {
  RequestState& r = *seq.request;
  EngineEvent e;
  e.seq_index = seq.index;
  e.n_prompt_tokens = seq.num_prompt_tokens();
  e.n_cached_tokens = std::max(0, seq.num_cached_tokens - seq.num_imported_tokens);
  e.embedding.assign(v, v + model.pooled_dim());
  e.time = now;
  e.first_scheduled = seq.first_scheduled;
  finish(seq, FinishReason::kStop, e);
  ++local.n_embeddings;
  r.stream->push(std::move(e));
}

void Engine::Impl::abort_request(uint64_t id) {
  auto it = requests.find(id);
  if (it == requests.end()) return;
  RequestState& r = *it->second;
  if (r.importing || r.disk_loading) {  // its blocks are being written: abort when that has ended
    r.abort_after_import = true;
    return;
  }
  const Clock::time_point now = Clock::now();
  for (auto& seq : r.seqs) {
    if (seq->status == SeqStatus::kFinished) continue;
    EngineEvent e;
    e.seq_index = seq->index;
    e.n_prompt_tokens = seq->num_prompt_tokens();
    e.n_cached_tokens = std::max(0, seq->num_cached_tokens - seq->num_imported_tokens);
    e.n_output_tokens = int32_t(seq->output.size());
    e.time = now;
    e.first_scheduled = seq->first_scheduled;
    finish(*seq, FinishReason::kAbort, e);
    r.stream->push(std::move(e));
  }
  for (uint64_t done : done_requests) requests.erase(done);
  done_requests.clear();
}

void Engine::Impl::abort_all() {
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests) ids.push_back(id);
  for (uint64_t id : ids) abort_request(id);
}

void Engine::Impl::fork(RequestState& r) {
  Sequence& parent = *r.seqs[0];
  for (size_t i = 1; i < r.seqs.size(); ++i) {
    Sequence& child = *r.seqs[i];
    child.kv_seq = kv.fork(parent.kv_seq);
    child.num_computed_tokens = parent.num_computed_tokens;
    child.num_cached_tokens = parent.num_cached_tokens;
    scheduler.add_running(&child);
  }
  r.forked = true;
}

}  // namespace omnibus
