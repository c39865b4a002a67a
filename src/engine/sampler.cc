#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "engine/logprobs.h"
#include "engine/top_k.h"
#include "kernels/ops.h"
#include "util/check.h"

namespace omnibus {

// ---------------------------------------------------------------- validation

Status validate(const SamplingParams& p, int32_t n_vocab) {
  if (n_vocab <= 0) return Status::invalid_argument("n_vocab must be positive, got {}", n_vocab);
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return Status::invalid_argument("temperature must be a finite value >= 0, got {}",
                                    p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return Status::invalid_argument("top_p must be in (0, 1], got {}", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return Status::invalid_argument("min_p must be in [0, 1], got {}", p.min_p);
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return Status::invalid_argument("repetition_penalty must be a finite value > 0, got {}",
                                    p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return Status::invalid_argument("presence_penalty must be in [-2, 2], got {}",
                                    p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return Status::invalid_argument("frequency_penalty must be in [-2, 2], got {}",
                                    p.frequency_penalty);
  }
  if (p.penalty_last_n < -1) {
    return Status::invalid_argument("penalty_last_n must be >= -1 (-1: whole history), got {}",
                                    p.penalty_last_n);
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= n_vocab) {
      return Status::invalid_argument("logit_bias token id {} is outside the vocabulary [0, {})",
                                      id, n_vocab);
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return Status::invalid_argument("logit_bias for token {} must be in [-100, 100], got {}", id,
                                      bias);
    }
  }
  if (p.n_logprobs < -1 || p.n_logprobs > 20) {
    return Status::invalid_argument("logprobs must be in [0, 20] (or -1: none), got {}",
                                    p.n_logprobs);
  }
  return Status::ok();
}

// ---------------------------------------------------------------- RNG

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

SamplerRng::SamplerRng(uint64_t seed) {
  for (uint64_t& s : s_) s = splitmix64(seed);
}

uint64_t SamplerRng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double SamplerRng::next_double() {
  // The top 53 bits, scaled by 2^-53: exact, so the same on every platform.
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

// ---------------------------------------------------------------- scratch

namespace {

struct Candidate {
  int32_t id;
  float logit;   // after bias, penalties and temperature
  float weight;  // exp(logit - max logit): unnormalised probability
};

// Strict total order: higher logit first, then lower id. Because it is total,
// nth_element/sort give the same sets and orders with every standard library.
inline bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Per-thread buffers shared by all Samplers on the thread; grown to the
// largest vocabulary seen, never shrunk. Between calls every flag/count is 0.
struct Scratch {
  std::vector<Candidate> candidates;             // [<= n_vocab]
  std::vector<int32_t> output_count;             // [n_vocab] output occurrences in W
  std::vector<uint8_t> in_window;                // [n_vocab] id occurs in W
  std::vector<int32_t> window_ids;               // distinct ids in W
  std::vector<std::pair<int32_t, float>> saved;  // (id, original logit)
  std::vector<uint8_t> saved_mark;               // [n_vocab] id already in saved
  std::vector<double> bin_mass;                  // top-p histogram
  std::vector<Candidate> edge;                   // top-p crossing bin

  void reserve(int32_t n_vocab) {
    const size_t n = static_cast<size_t>(n_vocab);
    if (output_count.size() >= n) return;
    candidates.reserve(n);
    output_count.resize(n, 0);
    in_window.resize(n, 0);
    saved_mark.resize(n, 0);
    window_ids.reserve(std::min<size_t>(n, 4096));
    saved.reserve(std::min<size_t>(n, 4096));
    bin_mass.reserve(1024);
    edge.reserve(n);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Remembers logits[id]'s value before its first change in this call.
void save_original(Scratch& s, const float* logits, int32_t id) {
  if (s.saved_mark[id]) return;
  s.saved_mark[id] = 1;
  s.saved.emplace_back(id, logits[id]);
}

void restore(Scratch& s, float* logits) {
  for (const auto& [id, value] : s.saved) {
    logits[id] = value;
    s.saved_mark[id] = 0;
  }
  s.saved.clear();
}

void apply_bias_and_penalties(const SamplingParams& p, int32_t n_vocab, Scratch& s, float* logits,
                              std::span<const int32_t> prompt, std::span<const int32_t> output) {
  for (const auto& [id, bias] : p.logit_bias) {
    save_original(s, logits, id);
    logits[id] += bias;
  }

  const bool any_penalty =
      p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!any_penalty || p.penalty_last_n == 0) return;

  // The window W: the last penalty_last_n positions of prompt ++ output.
  const size_t n_prompt = prompt.size();
  const size_t total = n_prompt + output.size();
  size_t begin = 0;
  if (p.penalty_last_n > 0 && total > static_cast<size_t>(p.penalty_last_n)) {
    begin = total - static_cast<size_t>(p.penalty_last_n);
  }
  for (size_t i = begin; i < total; ++i) {
    const bool is_output = i >= n_prompt;
    const int32_t t = is_output ? output[i - n_prompt] : prompt[i];
    if (t < 0 || t >= n_vocab) continue;
    if (!s.in_window[t]) {
      s.in_window[t] = 1;
      s.window_ids.push_back(t);
    }
    if (is_output) ++s.output_count[t];
  }

  const float r = p.repetition_penalty;
  for (const int32_t t : s.window_ids) {
    save_original(s, logits, t);
    float l = logits[t];
    if (r != 1.0f) l = l > 0.0f ? l / r : l * r;
    const int32_t c = s.output_count[t];
    l -= p.frequency_penalty * static_cast<float>(c);
    if (c > 0) l -= p.presence_penalty;
    logits[t] = l;
    s.in_window[t] = 0;
    s.output_count[t] = 0;
  }
  s.window_ids.clear();
}

// Greedy pick: ties -> lowest id, NaN never wins (kernels/ops.h argmax).
int32_t argmax_id(const float* logits, int32_t n_vocab) {
  return static_cast<int32_t>(argmax(logits, n_vocab));
}

// Candidate sets up to this size are sorted outright for top-p.
constexpr size_t kSortDirectlyBelow = 2048;

// Top-p over the unsorted candidates c[0, n) (logits within 40 nats of
// max_scaled) without sorting them all: histogram the mass by distance from
// the top logit (1/25.6 nat per bin), find the bin where the cumulative mass
// crosses top_p, and sort only that bin's members. Keeps every candidate of
// the bins above it plus the sorted prefix of the crossing bin that reaches the
// target, the same set a full sort would keep (up to summation rounding).
// Survivors are compacted to c[0, returned n) in id order, then the kept part
// of the crossing bin in `better` order: a fixed order for the draw.
size_t top_p_by_histogram(Scratch& s, size_t n, float max_scaled, float top_p) {
  constexpr int kBins = 1024;
  constexpr float kBinsPerNat = kBins / 40.0f;
  std::vector<Candidate>& c = s.candidates;
  auto bin_of = [&](const Candidate& cand) {
    return std::min(kBins - 1, static_cast<int>((max_scaled - cand.logit) * kBinsPerNat));
  };
  s.bin_mass.assign(kBins, 0.0);
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) {
    s.bin_mass[bin_of(c[i])] += c[i].weight;
    mass += c[i].weight;
  }
  const double target = static_cast<double>(top_p) * mass;
  double before = 0.0;  // mass of the bins above the crossing one
  int crossing = -1;
  for (int b = 0; b < kBins; ++b) {
    if (before + s.bin_mass[b] >= target) {
      crossing = b;
      break;
    }
    before += s.bin_mass[b];
  }
  if (crossing < 0) return n;  // rounding: keep everything

  std::vector<Candidate>& edge = s.edge;
  edge.clear();
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const int b = bin_of(c[i]);
    if (b < crossing) {
      c[kept++] = c[i];
    } else if (b == crossing) {
      edge.push_back(c[i]);
    }
  }
  std::sort(edge.begin(), edge.end(), better);
  double cum = before;
  for (const Candidate& cand : edge) {
    c[kept++] = cand;
    cum += cand.weight;
    if (cum >= target) break;
  }
  return kept;
}

// Stages 3-7 of the pipeline (see sampler.h) for temperature > 0.
int32_t sample_filtered(const SamplingParams& p, int32_t n_vocab, Scratch& s, const float* logits,
                        SamplerRng& rng) {
  const int32_t top = argmax_id(logits, n_vocab);
  const float inv_t = 1.0f / p.temperature;
  const float max_scaled = logits[top] * inv_t;
  if (!std::isfinite(max_scaled)) return top;  // all -inf, or a +inf logit: nothing to draw

  std::vector<Candidate>& c = s.candidates;
  c.clear();
  const float floor = max_scaled - 40.0f;  // drop the negligible tail (weight < e^-40)
  bool sorted = false;
  if (p.top_k > 0 && p.top_k < n_vocab) {
    // Top-k in the same pass: a heap of the k best with the worst at the front,
    // so most tokens cost one comparison and only k weights are computed.
    const size_t k = static_cast<size_t>(p.top_k);
    for (int32_t i = 0; i < n_vocab; ++i) {
      const Candidate cand{i, logits[i] * inv_t, 0.0f};
      if (cand.logit >= floor) offer_to_top_k(c, k, cand, better);
    }
    std::sort_heap(c.begin(), c.end(), better);  // best first: a fixed draw order
    for (Candidate& cand : c) cand.weight = std::exp(cand.logit - max_scaled);
    sorted = true;
  } else {
    // All candidates, in id order.
    for (int32_t i = 0; i < n_vocab; ++i) {
      const float l = logits[i] * inv_t;
      if (l >= floor) c.push_back({i, l, std::exp(l - max_scaled)});
    }
  }
  size_t n = c.size();  // survivors are c[0, n)

  if (p.top_p < 1.0f && n > 1) {
    if (!sorted && n > kSortDirectlyBelow) {
      n = top_p_by_histogram(s, n, max_scaled, p.top_p);  // survivors stay unsorted
    } else {
      if (!sorted) std::sort(c.begin(), c.begin() + n, better);
      sorted = true;
      double mass = 0.0;
      for (size_t i = 0; i < n; ++i) mass += c[i].weight;
      const double target = static_cast<double>(p.top_p) * mass;
      double cum = 0.0;
      for (size_t i = 0; i < n; ++i) {
        cum += c[i].weight;
        if (cum >= target) {
          n = i + 1;
          break;
        }
      }  // rounding may leave cum < target: then the whole set is kept
    }
  }

  if (p.min_p > 0.0f) {
    const float threshold = max_scaled + std::log(p.min_p);  // prob >= min_p * max prob
    if (sorted) {
      while (n > 1 && c[n - 1].logit < threshold) --n;
    } else {
      size_t kept = 0;
      for (size_t i = 0; i < n; ++i) {
        if (c[i].logit >= threshold) c[kept++] = c[i];
      }
      n = kept;  // >= 1: the top token always passes
    }
  }
  OMNIBUS_DCHECK(n >= 1);

  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) mass += c[i].weight;
  const double target = rng.next_double() * mass;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += c[i].weight;
    if (target < cum) return c[i].id;
  }
  return c[n - 1].id;  // rounding at the very top of the range
}

// Raw log_softmax of the (restored) logits: the sampled id's logprob and the
// n_logprobs best alternatives (nothing when n_logprobs < 0).
void fill_raw_logprobs(const SamplingParams& p, int32_t n_vocab, const float* logits,
                       SampledToken& out) {
  if (p.n_logprobs < 0) return;
  const float max_logit = logits[argmax_id(logits, n_vocab)];
  const float lse = log_sum_exp(logits, n_vocab, max_logit);  // as logprobs.cc
  out.logprob = logits[out.id] - lse;
  out.top_logprobs = top_logprobs(logits, n_vocab, p.n_logprobs, lse);
}

uint64_t seed_from_device() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

}  // namespace

// ---------------------------------------------------------------- Sampler

Sampler::Sampler(SamplingParams params, int32_t n_vocab)
    : params_(std::move(params)),
      n_vocab_(n_vocab),
      rng_(params_.has_seed ? params_.seed : seed_from_device()) {
  OMNIBUS_CHECK(validate(params_, n_vocab_).is_ok());
}

SampledToken Sampler::sample(float* logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output) {
  Scratch& s = scratch();
  s.reserve(n_vocab_);

  apply_bias_and_penalties(params_, n_vocab_, s, logits, prompt, output);
  SampledToken out;
  if (params_.temperature == 0.0f || params_.top_k == 1) {
    out.id = argmax_id(logits, n_vocab_);
  } else {
    out.id = sample_filtered(params_, n_vocab_, s, logits, rng_);
  }
  restore(s, logits);
  fill_raw_logprobs(params_, n_vocab_, logits, out);
  return out;
}

}  // namespace omnibus
