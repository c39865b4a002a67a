#include "model/sequence_runner_testing.h"

#include <algorithm>

namespace omnibus {

StatusOr<std::unique_ptr<SequenceRunner>> SequenceRunner::create(Model& model, int n_ctx,
                                                                 KvFormat kv_format, int block_size,
                                                                 int kv_residual_blocks) {
  if (n_ctx < 1) return Status::invalid_argument("context size must be positive, got {}", n_ctx);
  const int64_t n_blocks = (int64_t(n_ctx) + block_size - 1) / block_size;
  KvGeometry g = model.kv_geometry(block_size, kv_format);
  g.kv_residual_blocks = kv_residual_blocks;
  OMNIBUS_ASSIGN_OR_RETURN(std::unique_ptr<KvStorage> kv, KvStorage::create(g, n_blocks));
  return std::unique_ptr<SequenceRunner>(new SequenceRunner(model, std::move(kv), n_ctx));
}

SequenceRunner::SequenceRunner(Model& model, std::unique_ptr<KvStorage> kv, int n_ctx)
    : model_(model), kv_(std::move(kv)), n_ctx_(n_ctx) {
  block_table_.resize(size_t(kv_->n_blocks()));
  for (size_t i = 0; i < block_table_.size(); ++i) block_table_[i] = int32_t(i);
}

StatusOr<std::span<const float>> SequenceRunner::eval(std::span<const int32_t> tokens,
                                                      bool all_logits, int max_chunk) {
  if (tokens.empty()) return Status::invalid_argument("nothing to evaluate");
  if (n_past_ + int64_t(tokens.size()) > n_ctx_) {
    return Status::invalid_argument("sequence of {} tokens exceeds the context size {}",
                                    n_past_ + tokens.size(), n_ctx_);
  }
  const int64_t n_vocab = model_.config().n_vocab;
  if (all_logits) all_logits_.resize(tokens.size() * size_t(n_vocab));
  std::span<const float> logits;
  const int bs = kv_->geometry().block_size;
  for (size_t begin = 0; begin < tokens.size(); begin += size_t(max_chunk)) {
    const size_t n = std::min(tokens.size() - begin, size_t(max_chunk));
    batch_.clear();
    batch_.tokens.assign(tokens.begin() + long(begin), tokens.begin() + long(begin + n));
    StepSeq s;
    s.n_tokens = int32_t(n);
    s.n_past = n_past_;
    s.block_table = block_table_.data();
    s.n_blocks = (n_past_ + int32_t(n) + bs - 1) / bs;
    s.all_logits = all_logits;
    batch_.seqs.push_back(s);
    logits = model_.forward(batch_, *kv_);
    if (all_logits)
      std::copy(logits.begin(), logits.end(), all_logits_.begin() + long(begin) * n_vocab);
    n_past_ += int32_t(n);
  }
  if (all_logits)
    return std::span<const float>(all_logits_.data(), tokens.size() * size_t(n_vocab));
  return logits;
}

}  // namespace omnibus
