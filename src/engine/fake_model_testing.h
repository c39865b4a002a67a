// FakeModel (tests only): a Model whose logits depend on the whole context
// through the paged KV cache, with no kernels. For each new token at position
// p it writes (token, p) into the token's KV slot through the block table;
// the logits at p are a hash of the (token, position) pairs read back from
// slots 0..p. Wrong block tables, missed copy-on-write, lost or recomputed-
// wrong context all change the hash and so the tokens; a slot holding the
// wrong position aborts at once.
//
// Thread-safety: forward() from one thread at a time, like every Model;
// hold() / release() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kv/kv_storage.h"
#include "model/model.h"
#include "util/check.h"

namespace omnibus {

inline ModelConfig fake_model_config(int n_vocab, int n_ctx) {
  ModelConfig c;
  c.arch = "fake";
  c.name = "fake";
  c.n_vocab = n_vocab;
  c.n_ctx_train = n_ctx;
  c.n_embd = 4;
  c.n_layer = 1;
  c.n_head = 1;
  c.n_head_kv = 1;
  c.head_dim = 4;
  return c;
}

class FakeModel : public Model {
 public:
  explicit FakeModel(int n_vocab = 64, int n_ctx = 4096)
      : Model(fake_model_config(n_vocab, n_ctx)) {}

  int64_t n_forward_calls() const { return n_calls_; }
  // Makes every forward() sleep, so that tests can act on running requests.
  void set_step_delay(std::chrono::microseconds d) { delay_ = d; }
  // Until release(), every forward() waits. A test holds the model, submits a
  // set of requests and releases it: the engine cannot finish any request
  // before the last one is queued, however the threads are scheduled.
  void hold() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(gate_mu_);
      held_ = false;
    }
    gate_cv_.notify_all();
  }

  std::span<const float> forward(const StepBatch& batch, KvStorage& kv) override {
    ++n_calls_;
    {
      std::unique_lock<std::mutex> lock(gate_mu_);
      gate_cv_.wait(lock, [&] { return !held_; });
    }
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    const PagedKvLayer l = kv.layer(0);
    OMNIBUS_CHECK(l.format == KvFormat::kF32);
    const int n_vocab = config_.n_vocab;
    logits_.resize(size_t(batch.n_logit_rows()) * size_t(n_vocab));
    size_t tok = 0, row = 0;
    for (const StepSeq& s : batch.seqs) {
      for (int i = 0; i < s.n_tokens; ++i) {
        float* slot = this->slot(l, s, s.n_past + i);
        slot[0] = float(batch.tokens[tok + size_t(i)]);
        slot[1] = float(s.n_past + i);
      }
      for (int i = s.all_logits ? 0 : s.n_tokens - 1; i < s.n_tokens; ++i) {
        const int p = s.n_past + i;
        uint64_t h = 1469598103934665603ull;
        for (int q = 0; q <= p; ++q) {
          const float* slot = this->slot(l, s, q);
          OMNIBUS_CHECK(slot[1] == float(q));
          h = (h ^ uint64_t(slot[0])) * 1099511628211ull;
          h = (h ^ uint64_t(q)) * 1099511628211ull;
        }
        float* out = logits_.data() + row * size_t(n_vocab);
        for (int j = 0; j < n_vocab; ++j) {
          uint64_t x = h + uint64_t(j) * 0x9E3779B97F4A7C15ull;
          x ^= x >> 31;
          x *= 0xBF58476D1CE4E5B9ull;
          x ^= x >> 29;
          out[j] = float(x % 1000) / 100.0f;
        }
        ++row;
      }
      tok += size_t(s.n_tokens);
    }
    return logits_;
  }

 private:
  static float* slot(const PagedKvLayer& l, const StepSeq& s, int pos) {
    OMNIBUS_CHECK(pos / l.block_size < s.n_blocks);
    const int64_t block = s.block_table[pos / l.block_size];
    return static_cast<float*>(l.k) + (block * l.block_size + pos % l.block_size) * l.head_dim;
  }

  std::vector<float> logits_;
  int64_t n_calls_ = 0;
  std::chrono::microseconds delay_{0};
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool held_ = false;
};

// Holds a FakeModel's forward() for its scope (released on every exit, so a
// failed assertion cannot leave the engine thread waiting at destruction).
// A null model holds nothing.
class ForwardHold {
 public:
  explicit ForwardHold(FakeModel* m) : m_(m) {
    if (m_ != nullptr) m_->hold();
  }
  ~ForwardHold() { release(); }
  // Ends the hold early (idempotent).
  void release() {
    if (m_ != nullptr) m_->release();
    m_ = nullptr;
  }
  ForwardHold(const ForwardHold&) = delete;
  ForwardHold& operator=(const ForwardHold&) = delete;

 private:
  FakeModel* m_;
};

}  // namespace omnibus
