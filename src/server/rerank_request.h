// POST /v1/rerank (the Jina / Cohere shape vLLM and llama-server accept) and
// POST /v1/score (vLLM's), for models served with rank pooling (a BERT
// cross-encoder: --pooling rank, the GGUF's default for rerankers):
//
//   /v1/rerank  {query, documents: [string | {"text": string}], top_n?,
//               return_documents? (default true)}
//            -> {"id", "model", "usage": {"prompt_tokens", "total_tokens"},
//                "results": [{"index", "relevance_score", "document": {"text"}}]}
//               best first, at most top_n
//   /v1/score   {text_1: string | [string], text_2: string | [string]}: one
//               text_1 against each text_2, or pairs of equal-length lists
//            -> {"id", "object": "list", "model", "usage", "data": [{"index",
//                "object": "score", "score"}]}
//
// Each pair is one sequence, as llama-server forms it: [CLS] query [SEP]
// document [SEP] (BOS when the tokenizer adds one, EOS after each part when
// it adds EOS); the score is the classifier's raw output (as llama-server's
// relevance_score; vLLM applies a sigmoid, which keeps the order).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace omnibus::server {

struct PairSpec {
  std::vector<std::pair<std::string, std::string>> pairs;  // (query, document)
  bool rerank = true;                                      // false: /v1/score
  int32_t top_n = -1;                                      // rerank: -1 = all
  bool return_documents = true;                            // rerank
};

ApiResult<PairSpec> parse_rerank_request(const std::string& body, int32_t max_pairs);
ApiResult<PairSpec> parse_score_request(const std::string& body, int32_t max_pairs);

// scores[i] is pair i's; the response body for the spec's endpoint.
std::string pair_response(const PairSpec& spec, const std::vector<float>& scores,
                          const std::string& model, int64_t prompt_tokens);

}  // namespace omnibus::server
