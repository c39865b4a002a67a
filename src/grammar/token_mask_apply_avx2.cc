#include "grammar/token_mask_apply_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

namespace omnibus::grammar {

void apply_mask_avx2(const uint64_t* words, float* logits, int32_t n_vocab) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m256 neg_inf = _mm256_set1_ps(kNegInf);
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (int32_t base = 0; base < n_vocab; base += 64) {
    const uint64_t w = words[base >> 6];
    if (w == ~uint64_t{0}) continue;  // all allowed
    const int32_t n = std::min<int32_t>(64, n_vocab - base);
    float* l = logits + base;
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const uint32_t bits = uint32_t(w >> j) & 0xFFu;
      if (bits == 0xFFu) continue;
      // lanes whose bit is 0 (forbidden) become -inf
      const __m256i forbidden = _mm256_cmpeq_epi32(
          _mm256_and_si256(_mm256_set1_epi32(int(bits)), lane_bit), _mm256_setzero_si256());
      _mm256_storeu_ps(
          l + j, _mm256_blendv_ps(_mm256_loadu_ps(l + j), neg_inf, _mm256_castsi256_ps(forbidden)));
    }
    for (; j < n; ++j) {
      if (((w >> j) & 1) == 0) l[j] = kNegInf;
    }
  }
}

}  // namespace omnibus::grammar
