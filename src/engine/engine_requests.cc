// A request's life on the engine thread: the inbox's messages dispatched,
// taken in (accept: its prompt blocks loaded from outside, or scheduled), its
// sequences forked after the prompt, each sequence finished, and requests
// aborted.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/request.h"
#include "engine/sequence.h"

namespace omnibus {

void Engine::Impl::post(EngineMessage m) {
  {
    std::lock_guard<std::mutex> lock(mu);
    inbox.push_back(std::move(m));
  }
  cv.notify_one();
}

bool Engine::Impl::dispatch(EngineMessage& m, bool stopping) {
  return std::visit(
      [this, stopping](auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, SubmitMsg>) {
          accept(std::move(msg.request), /*may_load=*/!stopping);
        } else if constexpr (std::is_same_v<T, AbortMsg>) {
          abort_request(msg.request_id);
        } else if constexpr (std::is_same_v<T, UnpinMsg>) {
          unpin(msg.pin_id);
        } else if constexpr (std::is_same_v<T, TaskMsg>) {
          msg.run();
          return true;
        } else {
          static_assert(std::is_same_v<T, KvLoadDone>);
          end_kv_load(msg.request_id, msg.ok && !stopping);
        }
        return false;
      },
      m);
}

void Engine::Impl::accept(std::unique_ptr<RequestState> r, bool may_load) {
  const uint64_t id = r->id;
  RequestState& state = *r;
  requests.emplace(id, std::move(r));
  if (!may_load) state.req.kv_import.reset();  // nothing is fetched any more
  if (!may_load || !start_kv_load(state)) scheduler.add(state.seqs[0].get());
}

void Engine::Impl::finish(Sequence& seq, FinishReason reason, EngineEvent& event) {
  RequestState& r = *seq.request;
  if (r.req.pin_prompt_blocks && seq.index == 0 && reason != FinishReason::kAbort)
    pin_prompt(r, seq);
  store_finished(seq);
  if (draft != nullptr) draft->release(&seq);
  if (seq.index == 0 || r.forked) {
    scheduler.finish(&seq);
  } else {
    seq.status = SeqStatus::kFinished;  // not forked yet: never the scheduler's, holds no blocks
  }
  event.finish = reason;
  if (++r.n_finished == r.req.n) {
    event.final = true;
    event.pinned = r.pinned;
    done_requests.push_back(r.id);
    ++local.n_requests_finished;
  }
}

void Engine::Impl::finish_embedding(Sequence& seq, std::span<const float> v,
                                    Clock::time_point now) {
  RequestState& r = *seq.request;
  EngineEvent e;
  e.seq_index = seq.index;
  e.n_prompt_tokens = seq.num_prompt_tokens();
  e.n_cached_tokens = std::max(0, seq.num_cached_tokens - seq.num_imported_tokens);
  e.embedding.assign(v.begin(), v.end());
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
  if (r.seqs[0]->status == SeqStatus::kWaitingForKv) {  // blocks being written: abort once loaded
    r.abort_when_loaded = true;
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
