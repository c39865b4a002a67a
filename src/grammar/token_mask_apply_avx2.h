// TokenMasker::apply's AVX2 form (grammar/token_mask.h): 8 logits per step,
// the mask's bits widened to lanes with one compare, no branch per token.
// Bitwise the same as the scalar TokenMasker::apply_ref (token_mask_test.cc).
//
// REQUIRES: cpu_features().use_avx2(); words holds (n_vocab + 63) / 64 words.
// Thread-safety: stateless.
#pragma once

#include <cstdint>

namespace omnibus::grammar {

void apply_mask_avx2(const uint64_t* words, float* logits, int32_t n_vocab);

}  // namespace omnibus::grammar
