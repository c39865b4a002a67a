// The pooling endpoints' request parsers and response writers.
#include "server/embeddings_request.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/rerank_request.h"

namespace omnibus::server {
namespace {

const EmbeddingLimits kLimits{100, 8, 4};

TEST(EmbeddingsRequest, ParsesEveryInputShape) {
  auto a = parse_embedding_request(R"({"input": "hi"})", kLimits);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->inputs.size(), 1u);
  EXPECT_TRUE(a->inputs[0].is_text);
  auto b = parse_embedding_request(R"({"input": [[1, 2], "x", [3]], "encoding_format": "base64",
                                       "dimensions": 4, "truncate_prompt_tokens": -1})",
                                   kLimits);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(b->inputs.size(), 3u);
  EXPECT_EQ(b->inputs[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(b->base64);
  EXPECT_EQ(b->dimensions, 4);
  EXPECT_EQ(b->truncate_prompt_tokens, -1);
  auto c = parse_embedding_request(R"({"input": [5, 6, 7]})", kLimits);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->inputs.size(), 1u);
}

TEST(EmbeddingsRequest, RejectsWithTheField) {
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {"[]", ""},
           {R"({})", "input"},
           {R"({"input": 3})", "input"},
           {R"({"input": [100]})", "input"},
           {R"({"input": ["a", "b", "c", "d", "e"]})", "input"},
           {R"({"input": "x", "dimensions": 9})", "dimensions"},
           {R"({"input": "x", "encoding_format": "f16"})", "encoding_format"},
           {R"({"input": "x", "truncate_prompt_tokens": 0})", "truncate_prompt_tokens"}}) {
    auto r = parse_embedding_request(body, kLimits);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().param, param) << body;
  }
}

TEST(EmbeddingsRequest, TruncatesAsVllm) {
  // Token ids keep their last k; a text its first k with its closing token.
  auto ids = fit_embedding_input({1, 2, 3, 4, 5}, false, -1, 3, 8, 0);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{3, 4, 5}));
  auto text = fit_embedding_input({101, 7, 8, 9, 102}, true, 102, 3, 8, 0);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, (std::vector<int32_t>{101, 7, 102}));
  EXPECT_FALSE(fit_embedding_input(std::vector<int32_t>(9, 1), true, -1, 0, 8, 2).ok());
  EXPECT_TRUE(fit_embedding_input(std::vector<int32_t>(9, 1), true, -1, -1, 8, 2).ok());
}

TEST(EmbeddingsRequest, NormalisesTruncatesAndEncodes) {
  const std::vector<float> v = finish_embedding({3, 4, 12}, true, 2);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_NEAR(v[0], 0.6f, 1e-6);
  EXPECT_NEAR(v[1], 0.8f, 1e-6);
  EXPECT_EQ(finish_embedding({3, 4}, false, 0), (std::vector<float>{3, 4}));
  EXPECT_EQ(base64_encode("Man", 3), "TWFu");
  EXPECT_EQ(base64_encode("Ma", 2), "TWE=");
  EXPECT_EQ(base64_encode("M", 1), "TQ==");
  const float one = 1.0f;  // 00 00 80 3f
  EXPECT_EQ(base64_encode(&one, 4), "AACAPw==");
  const auto j = nlohmann::json::parse(embedding_response({{1.0f}, {0.5f}}, false, "m", 7));
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][1]["embedding"][0], 0.5);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  // Pooling none: rows of row_dim values per input.
  const auto rows = nlohmann::json::parse(
      embedding_response({{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}}, false, "m", 3, 2));
  ASSERT_EQ(rows["data"][0]["embedding"].size(), 3u);
  EXPECT_EQ(rows["data"][0]["embedding"][2], (std::vector<float>{5.0f, 6.0f}));
}

TEST(RerankRequest, OrdersByScoreAndKeepsTopN) {
  auto spec = parse_rerank_request(
      R"({"query": "q", "documents": ["a", {"text": "b"}, "c"], "top_n": 2})", 8);
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  ASSERT_EQ(spec->pairs.size(), 3u);
  EXPECT_EQ(spec->pairs[1], (std::pair<std::string, std::string>{"q", "b"}));
  const auto j = nlohmann::json::parse(pair_response(*spec, {0.1f, 0.9f, 0.5f}, "m", 9));
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["index"], 1);
  EXPECT_EQ(j["results"][0]["document"]["text"], "b");
  EXPECT_EQ(j["results"][1]["index"], 2);
  auto score = parse_score_request(R"({"text_1": "q", "text_2": ["x", "y"]})", 8);
  ASSERT_TRUE(score.ok());
  ASSERT_EQ(score->pairs.size(), 2u);
  const auto s = nlohmann::json::parse(pair_response(*score, {0.25f, -1.0f}, "m", 4));
  EXPECT_EQ(s["data"][1]["score"], -1.0);
  EXPECT_EQ(s["data"][0]["object"], "score");
  EXPECT_FALSE(parse_score_request(R"({"text_1": ["a", "b"], "text_2": ["x"]})", 8).ok());
  EXPECT_FALSE(parse_rerank_request(R"({"query": "q", "documents": "x"})", 8).ok());
  EXPECT_FALSE(parse_rerank_request(R"({"query": "q", "documents": ["x", "y", "z"]})", 2).ok());
}

}  // namespace
}  // namespace omnibus::server
