// Pooling: one sequence's last hidden states -> its embedding, and the
// normalisations the embedding APIs apply. Models call pool_rows() from their
// forward pass on the hidden states that pass computed (there is no second
// forward path for embeddings); the server normalises and truncates.
//
//   mean  the average of every token's row ([CLS] and [SEP] included, as
//         sentence-transformers and llama.cpp do)
//   cls   the first token's row
//   last  the last token's row
//
// Thread-safety: pure functions over caller-owned memory.
#pragma once

#include <cstdint>
#include <span>

#include "model/model_config.h"

namespace omnibus {

// out[0, n_embd) = pooling of h, [n_tok, n_embd] row-major, summed in double.
// REQUIRES: n_tok >= 1; p is kMean, kCls or kLast.
void pool_rows(PoolingType p, const float* h, int64_t n_tok, int64_t n_embd, float* out);

// v /= ||v||_2 (llama.cpp's embd_normalize 2); a zero vector stays zero.
void l2_normalize(std::span<float> v);

}  // namespace omnibus
