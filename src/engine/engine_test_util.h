// Helpers shared by the engine tests (tests only): a reference generator that
// runs one request alone through SequenceRunner, a collector that drains a
// RequestStream, and the models the tests run real kernels on.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "model/sequence_runner_testing.h"
#include "model/tiny_model_testing.h"
#include "util/testdata.h"

namespace omnibus {

struct SeqResult {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // row each token was sampled from
  FinishReason finish = FinishReason::kNone;
};

// One sequence, alone, through the single-sequence baseline: sampled with a
// Sampler like the engine's, max_tokens tokens, no stop conditions.
inline SeqResult reference_generate(Model& model, const std::vector<int32_t>& prompt,
                                    int32_t max_tokens, const SamplingParams& params,
                                    KvFormat kv_format = KvFormat::kF32) {
  const int32_t n_vocab = model.config().n_vocab;
  auto runner = SequenceRunner::create(model, int(prompt.size()) + max_tokens, kv_format, 16);
  EXPECT_TRUE(runner.is_ok());
  Sampler sampler(params, n_vocab);
  SeqResult r;
  auto logits = (*runner)->eval(prompt);
  for (int32_t i = 0; i < max_tokens; ++i) {
    EXPECT_TRUE(logits.is_ok());
    r.logits.emplace_back(logits->begin(), logits->end());
    std::vector<float> scratch = r.logits.back();
    const int32_t t = sampler.sample(scratch.data(), prompt, r.tokens).id;
    r.tokens.push_back(t);
    if (i + 1 < max_tokens) logits = (*runner)->eval(std::span<const int32_t>(&t, 1));
  }
  r.finish = FinishReason::kLength;
  return r;
}

// Drains a stream until its final event; results by sequence index.
inline std::map<int32_t, SeqResult> collect(RequestStream& stream,
                                            std::vector<EngineEvent>* events = nullptr) {
  std::map<int32_t, SeqResult> out;
  for (;;) {
    std::optional<EngineEvent> e = stream.pop(std::chrono::seconds(60));
    if (!e) {
      ADD_FAILURE() << "no event within 60 s";
      return out;
    }
    SeqResult& r = out[e->seq_index];
    if (e->token >= 0) r.tokens.push_back(e->token);
    if (e->finish != FinishReason::kNone) r.finish = e->finish;
    const bool final = e->final;
    if (events) events->push_back(std::move(*e));
    if (final) return out;
  }
}

// A model from the bytes of a GGUF file (a tiny_model_testing.h one); null (with a
// test failure) if it does not load.
inline std::unique_ptr<Model> load_gguf_bytes(const std::vector<uint8_t>& bytes, const char* name,
                                              ThreadPool& pool) {
  auto file = GgufFile::from_bytes(bytes.data(), bytes.size(), name);
  EXPECT_TRUE(file.is_ok());
  if (!file.is_ok()) return nullptr;
  auto model = load_model(std::shared_ptr<const GgufFile>(std::move(file).value()), pool);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? std::move(model).value() : nullptr;
}

// The tiny random-weight Llama the engine tests run real kernels on (n_ctx
// 256, seed 5).
inline std::unique_ptr<Model> load_tiny_llama(ThreadPool& pool) {
  TinyLlamaSpec spec;
  spec.n_ctx = 256;
  return load_gguf_bytes(make_tiny_llama_gguf(spec, 5), "tiny.gguf", pool);
}

// The bundled SmolLM2-135M (models/smollm2-135m.gguf) on `pool`; null when the
// file is absent (the caller skips), and a test failure when it does not load.
inline std::unique_ptr<Model> load_smollm2_if_present(ThreadPool& pool) {
  const std::string path = testdata::model_path("smollm2-135m.gguf");
  if (!std::filesystem::exists(path)) return nullptr;
  auto file = GgufFile::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  if (!file.is_ok()) return nullptr;
  auto model = load_model(std::shared_ptr<const GgufFile>(std::move(file).value()), pool);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? std::move(model).value() : nullptr;
}

inline SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

inline SamplingParams seeded(uint64_t seed, float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.has_seed = true;
  return p;
}

}  // namespace omnibus
