// Model: a loaded transformer that turns one StepBatch into logits, reading
// and writing K/V through the step's block tables. One implementation per
// architecture (architectures.h: one row each; the forward passes are
// llama_family.cc, gemma3.cc and the bert encoder's bert.cc); the engine sees only this interface.
//
// Weights: matmul weights with a packed kernel on this CPU live on the heap in
// matmul's packed layout, and their file pages are released after packing;
// the other tensors (norms, the token embedding's gathered rows, matmul
// weights without a packed kernel) are read from the GGUF file's read-only
// mapping, which the model keeps alive. Resident weight memory after loading
// is therefore about one model size, not two (model/weights.h has the rules). Activations live in
// buffers owned by the model that grow to the largest step seen and are then reused: a warm engine
// does not allocate.
//
// Thread-safety: forward() is called by one thread at a time (the engine
// thread); it uses the ThreadPool given at load time for its kernels.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_storage.h"
#include "model/model_config.h"
#include "model/step_batch.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;
class ThreadPool;

class Model {
 public:
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }

  // The KV geometry this model needs (layers, kv heads, head dim); the caller
  // picks block size and KV format.
  KvGeometry kv_geometry(int block_size, KvFormat format) const;

  // Runs one step. Returns logits, [batch.n_logit_rows(), n_vocab] row-major,
  // rows in sequence order; the span stays valid until the next forward().
  // Sequences marked StepSeq::pool get no logits row but a row of pooled().
  // REQUIRES: every block table covers n_past + n_tokens positions of `kv`.
  virtual std::span<const float> forward(const StepBatch& batch, KvStorage& kv) = 0;

  // Embeddings (model/pooling.h): the rows the last forward() pooled from its
  // last hidden states for the StepSeq::pool sequences, [n_pool_rows,
  // pooled_dim()] in sequence order, by pooling() (one row per sequence, or
  // each of its tokens' rows for pool_all_rows); valid until the next forward().
  // A decoder's last hidden state is its output-normed one (what the output
  // head reads), as llama.cpp's embeddings are. Not normalised.
  std::span<const float> pooled() const { return pooled_; }
  // Values per pooled row: n_embd, or a classifier's outputs (kRank: the
  // scores of cls.output, 1 for a reranker).
  virtual int32_t pooled_dim() const { return config_.n_embd; }
  PoolingType pooling() const { return pooling_; }
  // Chooses the pooling; kInvalidArgument for one this model cannot do
  // (the Llama-family decoders pool the last token; kNone, kMean and kCls
  // need every row of the prompt, so their prompts come whole, see
  // pools_whole_prompts(); kRank needs a classification head: bert's cls /
  // cls.output, or a causal reranker's cls.output over the last row,
  // Qwen3-Reranker); kNone: every token's row, StepSeq::pool_all_rows; Gemma 3
  // pools nothing). Not thread-safe with forward().
  Status set_pooling(PoolingType p);
  virtual bool supports_pooling(PoolingType /*p*/) const { return false; }
  // An encoder (bidirectional attention): it serves only pool sequences,
  // whole in one step, and keeps nothing in the KV cache.
  bool is_encoder() const { return !config_.causal; }
  // Whether a pooled prompt must be computed whole, in one step, with no
  // prefix reuse (the engine then raises its step budget to the context and
  // turns prefix caching off): an encoder, or a pooling that reads more rows
  // than the last (none, mean, cls).
  bool pools_whole_prompts() const {
    return is_encoder() || pooling_ == PoolingType::kNone || pooling_ == PoolingType::kMean ||
           pooling_ == PoolingType::kCls;
  }

  // Tells the model the longest sequence it will serve (the engine's
  // max_model_len), before the first forward(). A model whose computation
  // depends on it picks its parameters here, as llama.cpp does by n_ctx
  // (Phi-3's LongRoPE: the long factors beyond the original context). Until
  // called, the model assumes its training context. Not thread-safe with
  // forward().
  virtual void set_max_context(int32_t /*n_ctx*/) {}
  // Whether forward() reads the sliding-window layers' K/V through their own
  // layer groups' tables (StepBatch::group_tables) when the storage has
  // them (kv/kv_layer_groups.h); models that do not keep the uniform layout.
  virtual bool supports_sliding_window_kv() const { return false; }

  // The pool forward() runs its kernels on, lent to the caller (the engine
  // thread) for its own data-parallel work between steps, e.g. sampling the
  // step's sequences; null when the model has none.
  virtual ThreadPool* thread_pool() { return nullptr; }

  // Keeps `p` alive as long as the model (the loader's heap copies of small
  // weights the model points into).
  void keep_alive(std::shared_ptr<const void> p) { kept_.push_back(std::move(p)); }

 protected:
  explicit Model(ModelConfig config) : config_(std::move(config)) {}
  const ModelConfig config_;
  std::vector<float> pooled_;  // [n_pool_rows, n_embd], written by forward()
  PoolingType pooling_ = PoolingType::kLast;

 private:
  std::vector<std::shared_ptr<const void>> kept_;
};

// Called during loading with bytes done / total (for a progress bar).
using LoadProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Validates that every tensor the architecture needs exists with the right
// shape and a supported dtype and builds the model: packs the packable matmul
// weights (releasing their file pages) and touches the mapped ones the forward
// pass reads whole, so the first request is not slowed by page faults.
// `progress` sees bytes of tensors loaded out of all tensor bytes.
StatusOr<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file, ThreadPool& pool,
                                            const LoadProgressFn& progress = {});

}  // namespace omnibus
