// Mixture-of-experts feed-forward (Qwen 3 MoE, as llama.cpp's build_moe_ffn
// computes it with softmax gating and normalised weights):
//
//   p = softmax(xn Wrouter)                         // [n_expert] per token
//   E = the n_expert_used largest p (ties: lower id), in descending order
//   w_e = p_e / max(sum_{e in E} p_e, 6.1e-5)
//   out = sum_{e in E, in that order} w_e * Wdown_e(silu(xn Wgate_e) * (xn Wup_e))
//
// Dispatch is grouped by expert: the step's tokens routed to expert e are
// gathered into one block and run through e's matrices in one matmul each,
// so every expert's weights are read once per step for all its tokens, not
// once per token. A token's result does not depend on which other tokens
// chose the same expert (matmul rows are independent, the combination runs
// per token in a fixed order): batch invariance holds, and kPerToken (one
// matmul per token and expert, for the benchmark) gives bitwise the same.
//
// Thread-safety: MoeWeights is immutable after loading; moe_feed_forward
// writes only the buffers it is given and runs its kernels, copies and
// combination on `pool`.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "util/status.h"

namespace omnibus {

class ThreadPool;

struct MoeWeights {
  PackedWeight router;             // ffn_gate_inp [n_embd -> n_expert]
  std::vector<PackedWeight> gate;  // [n_expert] of [n_embd -> n_ff_exp]
  std::vector<PackedWeight> up;    // [n_expert] of [n_embd -> n_ff_exp]
  std::vector<PackedWeight> down;  // [n_expert] of [n_ff_exp -> n_embd]
};

// Loads blk.<il>.ffn_gate_inp.weight and the three 3-D expert tensors
// ffn_{gate,up,down}_exps.weight ([n_in, n_out, n_expert]), each expert
// packed on its own.
// The expert counts and sizes (qwen3moe's row's read_extras, architectures.h).
Status read_moe_config(const GgufFile& f, ModelConfig* c);

Status load_moe_weights(WeightLoader& w, const ModelConfig& c, int il, ThreadPool* pool,
                        MoeWeights* out);

// Scratch that grows to the largest step and is then reused.
struct MoeBuffers {
  std::vector<float> router;    // [n_tok, n_expert] router logits, then probabilities
  std::vector<int32_t> expert;  // [n_tok, k] chosen experts, best first
  std::vector<float> weight;    // [n_tok, k] their normalised weights
  std::vector<int32_t> row;     // [n_tok, k] the slot's row in the grouped blocks
  std::vector<int32_t> offset;  // [n_expert + 1] first grouped row of each expert
  std::vector<float> xg;        // [n_tok * k, n_embd] inputs grouped by expert
  std::vector<float> gate;      // [n_tok * k, n_ff_exp]
  std::vector<float> up;        // [n_tok * k, n_ff_exp]
  std::vector<float> yg;        // [n_tok * k, n_embd] expert outputs, grouped
  std::vector<int32_t> order;   // [n_expert] scratch: the top-k choice, then each
                                // expert's next free grouped row
  MatmulScratch matmul;
};

enum class MoeDispatch {
  kGrouped,   // one matmul per expert over all its tokens (what the model runs)
  kPerToken,  // one matmul per (token, expert): the baseline the benchmark compares
};

// out = the mixture of experts applied to xn, both [n_tok, n_embd] (see the
// top of this file).
void moe_feed_forward(const MoeWeights& m, const ModelConfig& c, const float* xn, int64_t n_tok,
                      float* out, MoeBuffers& b, ThreadPool& pool,
                      MoeDispatch dispatch = MoeDispatch::kGrouped);

// The routing step alone, for tests: fills b.router (probabilities), b.expert
// and b.weight for n_tok tokens whose router logits are in b.router.
void moe_route(const ModelConfig& c, int64_t n_tok, MoeBuffers& b);

}  // namespace omnibus
