#include "kv/kv_layer_groups.h"

#include <algorithm>

#include "util/check.h"

namespace omnibus {

KvLayerGroups KvLayerGroups::uniform(int n_layers) {
  OMNIBUS_CHECK(n_layers >= 1);
  KvLayerGroups g;
  g.groups_.resize(1);
  for (int il = 0; il < n_layers; ++il) {
    g.groups_[0].layers.push_back(il);
    g.layer_group_.push_back(0);
    g.layer_tensor_.push_back(il);
  }
  g.n_tensors_ = n_layers;
  return g;
}

KvLayerGroups KvLayerGroups::hybrid(const std::vector<bool>& is_swa, int window) {
  const int n_layers = int(is_swa.size());
  std::vector<int> full, sliding;
  for (int il = 0; il < n_layers; ++il) (is_swa[size_t(il)] ? sliding : full).push_back(il);
  if (window <= 0 || full.empty() || sliding.empty()) return uniform(n_layers);
  KvLayerGroups g;
  g.n_tensors_ = int(full.size());
  g.layer_group_.assign(size_t(n_layers), -1);
  g.layer_tensor_.assign(size_t(n_layers), -1);
  auto add_group = [&](int32_t w, std::span<const int> layers) {
    const int gi = int(g.groups_.size());
    g.groups_.push_back(KvLayerGroup{w, std::vector<int>(layers.begin(), layers.end())});
    for (size_t i = 0; i < layers.size(); ++i) {
      g.layer_group_[size_t(layers[i])] = gi;
      g.layer_tensor_[size_t(layers[i])] = int(i);
    }
  };
  add_group(0, full);
  for (size_t i = 0; i < sliding.size(); i += size_t(g.n_tensors_)) {
    const size_t n = std::min(sliding.size() - i, size_t(g.n_tensors_));
    add_group(window, std::span<const int>(sliding).subspan(i, n));
  }
  return g;
}

int64_t KvLayerGroups::blocks_per_seq(int64_t n_tokens, int block_size) const {
  if (n_tokens <= 0) return 0;
  int64_t n = 0;
  for (const KvLayerGroup& gr : groups_) {
    const int64_t w = gr.sliding_window;
    const int64_t first = w <= 0 || n_tokens <= w ? 0 : (n_tokens - w) / block_size;
    n += (n_tokens - 1) / block_size - first + 1;
  }
  return n;
}

int64_t KvLayerGroups::max_seq_tokens(int64_t n_blocks, int block_size) const {
  // blocks_per_seq grows with n_tokens: bisect on it. Group 0 (full
  // attention) alone bounds it by n_blocks * block_size.
  int64_t lo = 0, hi = n_blocks * block_size;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (blocks_per_seq(mid, block_size) <= n_blocks) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace omnibus
