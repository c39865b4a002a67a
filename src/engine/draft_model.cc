// DraftModel (engine/draft_model.h): catch up, then guess greedily, batched.
#include "engine/draft_model.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "util/check.h"

namespace omnibus {

DraftModel::DraftModel(Model& model, std::unique_ptr<KvCache> kv, int32_t max_step_tokens,
                       int32_t target_n_vocab)
    : model_(model),
      kv_(std::move(kv)),
      max_step_tokens_(std::max(1, max_step_tokens)),
      n_vocab_(std::min(model.config().n_vocab, target_n_vocab)) {
  OMNIBUS_CHECK(kv_ != nullptr && kv_->n_groups() == 1 && !kv_->prefix_caching());
}

void DraftModel::release(const void* key) {
  auto it = states_.find(key);
  if (it == states_.end()) return;
  free_state(it->second);
  states_.erase(it);
}

void DraftModel::free_state(State& st) {
  if (st.kv_seq >= 0) kv_->free(st.kv_seq);
  st.kv_seq = -1;
  st.fed.clear();
  st.n_match = 0;
}

bool DraftModel::reserve(State& st, int32_t n, std::span<const Job> jobs) {
  for (int attempt = 0;; ++attempt) {
    bool ok;
    if (st.kv_seq < 0) {
      st.kv_seq = kv_->allocate_new(PrefixMatch{}, n, /*keep_free=*/0, copies_);
      ok = st.kv_seq >= 0;
    } else {
      ok = kv_->allocate_slots(st.kv_seq, n, copies_);
    }
    if (ok) {
      OMNIBUS_CHECK(copies_.empty());  // nothing shared: no copy-on-write
      return true;
    }
    if (attempt == 1) return false;
    // Short: the sequences not drafting now give their draft KV back.
    std::unordered_set<const void*> wanted;
    for (const Job& j : jobs) wanted.insert(j.key);
    for (auto it = states_.begin(); it != states_.end();) {
      if (wanted.count(it->first) == 0) {
        free_state(it->second);
        it = states_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

int32_t DraftModel::argmax(const float* row) const {
  return int32_t(std::max_element(row, row + n_vocab_) - row);
}

void DraftModel::propose(std::span<const Job> jobs) {
  live_.clear();
  for (const Job& job : jobs) {
    OMNIBUS_CHECK(job.draft != nullptr);
    job.draft->clear();
    const int32_t n = job.tokens.size();
    if (job.k < 0 || n == 0) continue;
    State& st = states_[job.key];
    // The sequence only grows: the fed tokens that matched it still do.
    // Guessing needs the last token's row: it is fed again if held.
    const int32_t limit = std::min<int32_t>(int32_t(st.fed.size()), job.k > 0 ? n - 1 : n);
    st.n_match = std::min(st.n_match, limit);
    while (st.n_match < limit && st.fed[size_t(st.n_match)] == job.tokens[st.n_match]) {
      ++st.n_match;
    }
    if (int32_t(st.fed.size()) > st.n_match) {  // rejected guesses (or the last token): drop
      kv_->truncate(st.kv_seq, st.n_match);
      st.fed.resize(size_t(st.n_match));
    }
    if (job.k == 0 && st.n_match == n) continue;  // nothing to feed, nothing to guess
    live_.push_back({&job, &st, st.n_match, job.k});
  }
  // Forwards until every live sequence has fed its tokens and made its
  // guesses: a sequence feeds what it has not fed (chunks of at most
  // max_step_tokens_ a forward), and once caught up, its last guess.
  const auto start = std::chrono::steady_clock::now();
  const uint64_t guesses_before = n_guesses_;
  while (!live_.empty()) {
    batch_.clear();
    in_batch_.clear();
    int32_t budget = max_step_tokens_;
    for (size_t i = 0; i < live_.size() && budget > 0; ++i) {
      Live& l = live_[i];
      const int32_t n = l.job->tokens.size();
      const bool catching_up = l.pending_from < n;
      const int32_t take = catching_up ? std::min(n - l.pending_from, budget) : 1;
      if (!reserve(*l.state, take, jobs)) {
        l.left = 0;  // no room: this sequence gets what it has
        l.pending_from = n;
        continue;
      }
      State& st = *l.state;
      StepSeq s;
      s.n_tokens = take;
      s.n_past = int32_t(st.fed.size());
      for (int32_t t = 0; t < take; ++t) {
        const int32_t tok = catching_up ? l.job->tokens[l.pending_from + t] : l.job->draft->back();
        batch_.tokens.push_back(tok);
        st.fed.push_back(tok);
      }
      if (catching_up) l.pending_from += take;
      const std::span<const int32_t> table = kv_->block_table(st.kv_seq);
      s.block_table = table.data();
      s.n_blocks = int32_t(table.size());
      batch_.seqs.push_back(s);
      in_batch_.push_back(i);
      budget -= take;
    }
    if (!batch_.seqs.empty()) {
      const std::span<const float> logits = model_.forward(batch_, kv_->storage());
      ++n_forwards_;
      const int32_t row_len = model_.config().n_vocab;
      OMNIBUS_CHECK(int64_t(logits.size()) == int64_t(batch_.seqs.size()) * row_len);
      for (size_t b = 0; b < in_batch_.size(); ++b) {
        Live& l = live_[in_batch_[b]];
        // mid catch-up, or feeding only: row unused
        if (l.pending_from < l.job->tokens.size() || l.left == 0) continue;
        l.job->draft->push_back(argmax(logits.data() + int64_t(b) * row_len));
        --l.left;
        ++n_guesses_;
      }
    }
    // Those done leave; a batch that took nobody ends it (no room for anyone).
    next_.clear();
    for (const Live& l : live_) {
      if (l.left > 0 || l.pending_from < l.job->tokens.size()) next_.push_back(l);
    }
    if (batch_.seqs.empty()) next_.clear();
    live_.swap(next_);
  }
  const double call =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  constexpr double kWeight = 0.3;
  seconds_ += call;
  last_call_seconds_ = call;
  seconds_per_call_ += kWeight * (call - seconds_per_call_);
  if (n_guesses_ > guesses_before) {
    const double per_guess = call / double(n_guesses_ - guesses_before);
    seconds_per_guess_ = seconds_per_guess_ < 0
                             ? per_guess
                             : seconds_per_guess_ + kWeight * (per_guess - seconds_per_guess_);
  }
}

}  // namespace omnibus
