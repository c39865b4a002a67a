// SequenceRunner (a test helper): drives one sequence through a Model with a
// private KV cache whose block table is simply 0, 1, 2, ... It is the smallest
// correct way to use the model, and the reference the batched engine must
// reproduce bit for bit: model tests (*_test.cc, forward_golden_testing.h) and
// engine tests (engine_test_util.h) compare against it. No command uses it:
// generate, bench and perplexity run on the Engine (engine/engine.h).
//
// Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kv/kv_storage.h"
#include "model/model.h"

namespace omnibus {

class SequenceRunner {
 public:
  // A KV cache for n_ctx tokens of `model`, in blocks of block_size;
  // kv_residual_blocks: q4/kivi2 fp16 window (-1: the format's default).
  static StatusOr<std::unique_ptr<SequenceRunner>> create(Model& model, int n_ctx,
                                                          KvFormat kv_format = KvFormat::kF16,
                                                          int block_size = 16,
                                                          int kv_residual_blocks = -1);

  // Appends `tokens` to the sequence, in chunks of at most max_chunk tokens,
  // and returns the logits of the last token ([n_vocab]) or, with all_logits,
  // of every token ([tokens.size(), n_vocab]). The span is valid until the
  // next call. Fails if the context would overflow.
  StatusOr<std::span<const float>> eval(std::span<const int32_t> tokens, bool all_logits = false,
                                        int max_chunk = 512);

  void reset() { n_past_ = 0; }
  int n_past() const { return n_past_; }
  int n_ctx() const { return n_ctx_; }

 private:
  SequenceRunner(Model& model, std::unique_ptr<KvStorage> kv, int n_ctx);
  Model& model_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<int32_t> block_table_;
  const int n_ctx_;
  int n_past_ = 0;
  StepBatch batch_;
  std::vector<float> all_logits_;
};

}  // namespace omnibus
