// POST /v1/embeddings (OpenAI's shape, with vLLM's truncate_prompt_tokens):
// the request body -> EmbeddingSpec, and the pooled vectors -> the response.
//
//   input                  a string, a list of strings, a list of token ids or a
//                          list of lists of token ids (each non-empty)
//   encoding_format        "float" (default) or "base64" (little-endian float32
//                          bytes, base64: what the openai client decodes)
//   dimensions             1 .. n_embd: keep the first `dimensions` values and
//                          normalise again (Matryoshka truncation)
//   truncate_prompt_tokens k >= 1 (or -1: the model's maximum): cut each input
//                          to k tokens, as vLLM does: a text keeps its first
//                          ones (with its closing [SEP] / EOS, when the tokenizer
//                          added one), a list of token ids its last ones;
//                          without it an input longer than the context is a 400
//   model, user            accepted and ignored (one model per server)
//
// Response: {"object": "list", "data": [{"object": "embedding", "index": i,
// "embedding": [...] | "<base64>"}], "model": ..., "usage": {"prompt_tokens":
// n, "total_tokens": n}}.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace omnibus::server {

struct EmbeddingSpec {
  std::vector<PromptInput> inputs;  // one or more
  bool base64 = false;
  int32_t dimensions = 0;              // 0: all of them
  int32_t truncate_prompt_tokens = 0;  // 0: none; -1: the context length
};

struct EmbeddingLimits {
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t max_inputs = 2048;  // OpenAI's bound on a batch
};

ApiResult<EmbeddingSpec> parse_embedding_request(const std::string& body,
                                                 const EmbeddingLimits& limits);

// One input's tokens after truncation (above; truncate -1 means max_len, 0
// none); `end_token` >= 0: the token a text's tokenization ended with, kept
// last. A 400 naming `input` when longer than max_len.
ApiResult<std::vector<int32_t>> fit_embedding_input(std::vector<int32_t> ids, bool from_text,
                                                    int32_t end_token, int32_t truncate,
                                                    int32_t max_len, size_t index);

// The vector a client gets: normalised (when `normalize`), truncated to
// `dimensions` (> 0) and then normalised again.
std::vector<float> finish_embedding(std::vector<float> v, bool normalize, int32_t dimensions);

// The response body; vectors[i] is input i's. row_dim > 0 (pooling none):
// vectors[i] holds one row of row_dim values per token, and its "embedding" is
// the list of those rows (base64: all rows' float32 bytes, in order).
std::string embedding_response(const std::vector<std::vector<float>>& vectors, bool base64,
                               const std::string& model, int64_t prompt_tokens,
                               int32_t row_dim = 0);

// Base64 (RFC 4648, padded) of `n` bytes.
std::string base64_encode(const void* data, size_t n);

}  // namespace omnibus::server
