// Sampler: turns one sequence's logits into its next token (plus logprobs).
//
// One Sampler per sequence. It owns that sequence's random stream, so a seeded
// request gives the same tokens whatever else shares its engine step.
//
// Pipeline, in this order (each stage sees the output of the one before):
//   1. logit_bias           logit[id] += bias                     (OpenAI)
//   2. penalties over the window W = the last `penalty_last_n` tokens of
//      prompt ++ output (-1: the whole history, 0: no penalties):
//        repetition         for every id in W (prompt or output):
//                           logit > 0 ? logit / r : logit * r     (HF / llama.cpp / vLLM)
//        frequency          logit -= f * c(id)                    (OpenAI)
//        presence           logit -= p * (c(id) > 0)              (OpenAI)
//      where c(id) counts `id` among the OUTPUT tokens inside W only. As in
//      vLLM, repetition counts prompt and output, presence/frequency count
//      output only. Repetition is applied before frequency/presence.
//   3. temperature          0 => greedy: argmax, ties -> lowest id; stages 4-6
//                           are skipped. Otherwise logit /= T.
//   4. top-k                keep the k highest (k <= 0: disabled)
//   5. top-p                keep the smallest prefix of the sorted, renormalised
//                           distribution whose mass reaches p (the token that
//                           crosses p is kept; 1: disabled)
//   6. min-p                keep tokens with prob >= min_p * max prob (0: disabled)
//   7. draw from the renormalised survivors with the sequence's RNG.
// Ordering ties everywhere are broken by lower token id, so the result is a
// function of (params, seed, logits, history) alone.
//
// Logprobs are "raw", like vLLM's default logprobs mode: log_softmax of the
// model's logits as passed in, before bias, penalties or temperature. The
// sampled token's logprob and the top `n_logprobs` alternatives (sorted by
// descending logprob, ties by id) are both raw. With n_logprobs = -1 (the
// default: the request asked for none) neither is computed, which saves a
// log-sum-exp over the vocabulary per token.
//
// The RNG is xoshiro256** seeded through splitmix64, with our own
// u64 -> double conversion, so a seed gives the same stream on every platform.
// Without a seed the state is drawn from std::random_device at construction.
//
// Cost: greedy and min-p-only are one pass over the vocabulary; top-k keeps a
// k-entry heap during that pass (exp() only for the k kept); top-p without top-k over a large set
// histograms the mass by logit and sorts only the bin where the cumulative
// mass crosses p (small sets are sorted outright).
// Tokens whose probability is below e^-40 of the top token's are dropped up
// front (together they hold < 1e-12 of the mass). Scratch buffers are
// thread_local, shared by every Sampler that runs on a thread, so a Sampler
// itself is small: params plus 32 bytes of RNG state. (The engine samples a
// step's sequences in parallel on the model's thread pool, engine_sampling.cc
// sample_all: each pool thread has its own buffers, each Sampler runs on one
// thread per call.) Once a thread's buffers have grown to the vocabulary size,
// sample() allocates only the returned top_logprobs vector (and only when
// n_logprobs > 0). The logprobs use engine/logprobs.h, as prompt logprobs do.
//
// Thread-safety: none within a Sampler: it belongs to one sequence and is
// used by one thread at a time (successive calls may come from different
// threads). Different Samplers may run on different threads concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "util/status.h"

namespace omnibus {

struct SamplingParams {
  float temperature = 1.0f;         // 0 => greedy (argmax; ties -> lowest id)
  int32_t top_k = 0;                // <= 0 => disabled
  float top_p = 1.0f;               // (0, 1]; 1 => disabled
  float min_p = 0.0f;               // [0, 1]; 0 => disabled
  float repetition_penalty = 1.0f;  // > 0; 1 => disabled
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  int32_t penalty_last_n = 64;      // >= -1; -1 => whole history, 0 => no penalties
  std::vector<std::pair<int32_t, float>> logit_bias;  // (id, bias in [-100, 100])
  uint64_t seed = 0;
  bool has_seed = false;  // false => seeded from std::random_device
  int32_t n_logprobs =
      -1;  // -1: no logprobs; [0, 20]: the sampled one's plus this many alternatives
};

// OK, or kInvalidArgument naming the first out-of-range field.
Status validate(const SamplingParams& params, int32_t n_vocab);

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.0f;  // raw log_softmax of the sampled id (0 when n_logprobs < 0)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // [n_logprobs] (id, raw logprob)
};

// xoshiro256** (Blackman & Vigna), seeded by expanding a 64-bit seed with
// splitmix64. Identical output on every platform.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed);
  uint64_t next_u64();
  double next_double();  // uniform in [0, 1), 53 random bits

 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  // REQUIRES: validate(params, n_vocab).is_ok().
  Sampler(SamplingParams params, int32_t n_vocab);

  // logits: [n_vocab] for this sequence; used as scratch but restored to its
  // input values before returning. prompt/output: the sequence's history, for
  // the penalties (ids outside [0, n_vocab) are ignored).
  SampledToken sample(float* logits, std::span<const int32_t> prompt,
                      std::span<const int32_t> output);

  const SamplingParams& params() const { return params_; }

 private:
  // Constant after construction.
  SamplingParams params_;
  int32_t n_vocab_;

  SamplerRng rng_;  // this sequence's random stream
};

}  // namespace omnibus
