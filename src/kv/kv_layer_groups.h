// KvLayerGroups: how a model's layers share the KV pool (vLLM's hybrid KV
// cache manager, docs/design/hybrid_kv_cache_manager.md).
//
// A model whose layers all attend to every earlier token has one group: every
// layer owns a tensor of the pool and a block holds a token range in all of
// them (today's layout). A model with sliding-window layers (Gemma 3: five of
// every six see only the last `window` tokens) splits its layers into groups
// of equal size, one group of full-attention layers and as many of
// sliding-window layers as it takes; each group has its own block table per
// sequence, over one block pool and one block size:
//
//   Gemma 3 270M: 18 layers, full at 5, 11, 17 -> groups of 3 layers:
//     group 0 (full)      layers  5 11 17    tensors 0 1 2
//     group 1 (window)    layers  0  1  2    tensors 0 1 2
//     group 2 (window)    layers  3  4  6    ...
//     ...                 ...
//     group 5 (window)    layers 14 15 16
//
// The pool has n_tensors() tensors (layers' worth of K/V), not n_layers: a
// block is n_tensors layers of block_size tokens, and belongs to one group at
// a time, whose layer i keeps its K/V in tensor i of that block. A sliding
// group's table lets go of the blocks wholly outside every token's window, so
// a long sequence holds its full-attention layers' blocks plus a window's
// worth per sliding group. A group shorter than the others (the last sliding
// group when the counts do not divide) leaves its spare tensors unused.
//
// Thread-safety: a value; constant after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace omnibus {

struct KvLayerGroup {
  int32_t sliding_window = 0;  // 0: full attention; w: a query at p sees keys (p - w, p]
  std::vector<int> layers;     // model layers, in increasing order; layer i uses tensor i
};

class KvLayerGroups {
 public:
  // One full-attention group of all n_layers layers (the layout without
  // sliding-window KV). REQUIRES: n_layers >= 1.
  static KvLayerGroups uniform(int n_layers);
  // The hybrid layout for layers is_swa (sliding ones see `window` tokens):
  // groups of as many layers as the model has full-attention ones, the full
  // group first. uniform() when there are no sliding layers, no
  // full-attention ones (every group would slide; not supported: the
  // prefix cache anchors sliding blocks to full ones), or window <= 0.
  static KvLayerGroups hybrid(const std::vector<bool>& is_swa, int window);

  int n_groups() const { return int(groups_.size()); }
  const KvLayerGroup& group(int g) const { return groups_[size_t(g)]; }
  bool is_hybrid() const { return groups_.size() > 1; }
  int n_layers() const { return int(layer_group_.size()); }
  // Tensors of the pool: layers per group (n_layers when uniform).
  int n_tensors() const { return n_tensors_; }
  int group_of(int layer) const { return layer_group_[size_t(layer)]; }
  int tensor_of(int layer) const { return layer_tensor_[size_t(layer)]; }
  // The window of group g (0 for full attention).
  int32_t window(int g) const { return groups_[size_t(g)].sliding_window; }

  // Blocks a sequence of n_tokens tokens holds in all groups together while
  // its last token is computed: the full group's blocks for every position
  // plus, per sliding group, those covering the last token's window
  // [n_tokens - w, n_tokens - 1].
  int64_t blocks_per_seq(int64_t n_tokens, int block_size) const;
  // The longest sequence n_blocks blocks can hold (blocks_per_seq <= n_blocks).
  int64_t max_seq_tokens(int64_t n_blocks, int block_size) const;

 private:
  std::vector<KvLayerGroup> groups_;
  std::vector<int> layer_group_;   // [n_layers]
  std::vector<int> layer_tensor_;  // [n_layers]
  int n_tensors_ = 0;
};

}  // namespace omnibus
