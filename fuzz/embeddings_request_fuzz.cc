// libFuzzer target for the /v1/embeddings request parser: arbitrary bytes as
// the body. Bad bodies must come back as a 400 ApiError naming what is wrong
// (never a crash, a throw or an empty message); good ones must respect the
// limits, and the response writer must accept what the parser produced.
// Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/embeddings_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  omnibus::server::EmbeddingLimits limits;
  limits.n_vocab = 1000;
  limits.n_embd = 16;
  limits.max_inputs = 64;
  auto spec = omnibus::server::parse_embedding_request(body, limits);
  if (!spec.ok()) {
    if (spec.error().status != 400 || spec.error().message.empty()) __builtin_trap();
    return 0;
  }
  if (spec->inputs.empty() || spec->inputs.size() > size_t(limits.max_inputs)) __builtin_trap();
  if (spec->dimensions < 0 || spec->dimensions > limits.n_embd) __builtin_trap();
  std::vector<std::vector<float>> vectors;
  for (size_t i = 0; i < spec->inputs.size(); ++i) {
    const auto& in = spec->inputs[i];
    if (!in.is_text) {
      for (int32_t id : in.ids) {
        if (id < 0 || id >= limits.n_vocab) __builtin_trap();
      }
      auto fit = omnibus::server::fit_embedding_input(in.ids, false, -1,
                                                      spec->truncate_prompt_tokens, 8, i);
      if (fit.ok() && fit->size() > 8) __builtin_trap();
    }
    vectors.push_back(
        omnibus::server::finish_embedding(std::vector<float>(16, 0.25f), true, spec->dimensions));
  }
  const std::string out = omnibus::server::embedding_response(vectors, spec->base64, "m", 1);
  if (out.empty()) __builtin_trap();
  return 0;
}
