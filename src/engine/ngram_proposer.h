// Prompt lookup (n-gram) proposals for speculative decoding (llama.cpp's
// lookup decoding, vLLM's `ngram` speculator): the continuation of the most
// recent earlier occurrence of the sequence's last n tokens, searched in its
// own prompt and output, is guessed to follow again.
//
//   tokens: ... a b c X Y Z ... a b c       (n = 3: "a b c" matched)
//                     ^^^^^ proposed: X Y Z (at most k)
//
// n runs from max_n down to min_n; the first n with a match wins (a longer
// match is a better guess). Among matches of that n the most recent one is
// taken. At most k tokens are proposed, fewer where the history ends.
// Verification (engine_speculation.cc) decides what is kept: a proposal never
// changes what is generated, only how many tokens one step yields.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace omnibus {

struct NgramParams {
  int32_t min_n = 1;  // >= 1
  int32_t max_n = 4;  // >= min_n
};

// Replaces `out` with at most k proposed tokens (none: no match) for the
// history prompt ++ output. Does not allocate once `out` has capacity k.
// REQUIRES: 1 <= p.min_n <= p.max_n, k >= 0.
void propose_ngram(std::span<const int32_t> prompt, std::span<const int32_t> output,
                   const NgramParams& p, int32_t k, std::vector<int32_t>& out);

}  // namespace omnibus
