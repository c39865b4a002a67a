// Embedding requests (Request::embed) through the engine: the pooled vector
// does not depend on chunking, on what shares the step or on the prefix
// cache; generation next to embeddings is unchanged; blocks are freed at once;
// an encoder (all-MiniLM-L6-v2) serves whole prompts and only embeddings.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/pooling.h"

namespace omnibus {
namespace {

std::unique_ptr<Model> load_file(const std::string& name, ThreadPool& pool) {
  const std::string path = testdata::model_path(name);
  EXPECT_TRUE(std::filesystem::exists(path)) << path << ": run scripts/fetch_models.sh";
  auto file = GgufFile::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  if (!file.is_ok()) return nullptr;
  auto model = load_model(std::shared_ptr<const GgufFile>(std::move(file).value()), pool);
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  return model.is_ok() ? std::move(model).value() : nullptr;
}

EngineConfig config(int32_t budget, bool prefix_caching = true) {
  EngineConfig c;
  c.block_size = 16;
  c.kv_format = KvFormat::kF32;
  c.kv_cache_bytes = int64_t(32) << 20;
  c.max_num_batched_tokens = budget;
  c.enable_prefix_caching = prefix_caching;
  c.max_model_len = 512;
  c.log_startup = false;
  return c;
}

Request embed_request(std::vector<int32_t> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  r.embed = true;
  return r;
}

std::vector<int32_t> prompt_of(int32_t len, int32_t seed, int32_t n_vocab) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < len; ++i) p.push_back((seed * 7919 + i * 104729) % n_vocab);
  return p;
}

std::vector<float> embedding_of(Engine& engine, std::vector<int32_t> prompt) {
  auto s = engine.submit(embed_request(std::move(prompt)));
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  if (!s.is_ok()) return {};
  std::vector<EngineEvent> events;
  collect(**s, &events);
  EXPECT_EQ(events.size(), 1u);  // one event: the vector, no token
  EXPECT_TRUE(events.back().final);
  EXPECT_EQ(events.back().token, -1);
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
  return events.back().embedding;
}

// Qwen 3 (random weights), last-token pooling: the vector is the same
// whether the prompt ran whole, in chunks of 8, or after a prefix-cache hit,
// and it is the output-normed hidden state the logits come from.
TEST(EngineEmbedding, DecoderLastTokenIsChunkAndCacheInvariant) {
  ThreadPool pool(2);
  auto model = load_file("random/qwen3.gguf", pool);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->set_pooling(PoolingType::kLast).is_ok());
  const int32_t n_vocab = model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_of(70, 3, n_vocab);
  std::vector<float> whole, chunked, cached;
  {
    auto engine = Engine::create(*model, config(512, false));
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    EXPECT_TRUE((*engine)->info().can_pool && !(*engine)->info().encoder);
    whole = embedding_of(**engine, prompt);
  }
  {
    auto engine = Engine::create(*model, config(8, false));
    ASSERT_TRUE(engine.is_ok());
    chunked = embedding_of(**engine, prompt);
  }
  {
    auto engine = Engine::create(*model, config(512, true));
    ASSERT_TRUE(engine.is_ok());
    embedding_of(**engine, prompt);
    cached = embedding_of(**engine, prompt);  // 64 of its 70 tokens from the cache
    const auto st = (*engine)->wait_idle(std::chrono::seconds(30));
    ASSERT_TRUE(st.has_value());
    EXPECT_GT(st->prefix_cache_hits, 0u);
    EXPECT_EQ(st->kv_blocks_used, 0);
    EXPECT_EQ(st->n_embeddings, 2u);
  }
  ASSERT_EQ(whole.size(), size_t(model->config().n_embd));
  EXPECT_EQ(chunked, whole);
  EXPECT_EQ(cached, whole);
  double norm = 0;
  for (float x : whole) norm += double(x) * x;
  EXPECT_GT(norm, 0.0);
}

// Embeddings batched with greedy generations: the generations' tokens are
// those of a run alone, and each vector is the one computed alone.
TEST(EngineEmbedding, BatchedWithGenerationChangesNeither) {
  ThreadPool pool(2);
  auto model = load_file("random/qwen3.gguf", pool);
  ASSERT_NE(model, nullptr);
  ASSERT_TRUE(model->set_pooling(PoolingType::kLast).is_ok());
  const int32_t n_vocab = model->config().n_vocab;
  std::vector<std::vector<float>> alone;
  std::vector<int32_t> gen_alone;
  Request gen;
  gen.prompt = prompt_of(20, 11, n_vocab);
  gen.max_tokens = 12;
  gen.sampling = greedy();
  {
    auto engine = Engine::create(*model, config(64, false));
    ASSERT_TRUE(engine.is_ok());
    for (int i = 0; i < 4; ++i)
      alone.push_back(embedding_of(**engine, prompt_of(10 + 9 * i, i, n_vocab)));
    auto s = (*engine)->submit(gen);
    ASSERT_TRUE(s.is_ok());
    gen_alone = collect(**s)[0].tokens;
  }
  auto engine = Engine::create(*model, config(64, false));
  ASSERT_TRUE(engine.is_ok());
  auto g = (*engine)->submit(gen);
  ASSERT_TRUE(g.is_ok());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = (*engine)->submit(embed_request(prompt_of(10 + 9 * i, i, n_vocab)));
    ASSERT_TRUE(s.is_ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 4; ++i) {
    std::vector<EngineEvent> events;
    collect(*streams[size_t(i)], &events);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].embedding, alone[size_t(i)]) << "embedding " << i;
    EXPECT_EQ(events[0].n_prompt_tokens, 10 + 9 * i);
  }
  EXPECT_EQ(collect(**g)[0].tokens, gen_alone);
  const auto st = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kv_blocks_used, 0);
}

TEST(EngineEmbedding, RequestsThatCannotEmbedAreRefused) {
  ThreadPool pool(2);
  auto model = load_file("random/qwen3.gguf", pool);
  ASSERT_NE(model, nullptr);
  auto engine = Engine::create(*model, config(64));
  ASSERT_TRUE(engine.is_ok());
  Request two = embed_request({1, 2, 3});
  two.n = 2;
  EXPECT_FALSE((*engine)->submit(two).is_ok());
  EXPECT_FALSE((*engine)->submit(embed_request(std::vector<int32_t>(513, 1))).is_ok());
  EXPECT_TRUE((*engine)->submit(embed_request(std::vector<int32_t>(512, 1))).is_ok());
}

// all-MiniLM-L6-v2: an encoder. Several sequences in one step pool as each
// alone; a prompt longer than the step budget still runs whole; generation
// is refused; nothing stays in the pool.
TEST(EngineEmbedding, EncoderRunsWholePromptsAndOnlyEmbeds) {
  ThreadPool pool(2);
  auto model = load_file("all-minilm-l6-v2.gguf", pool);
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->is_encoder());
  EXPECT_EQ(model->pooling(), PoolingType::kMean);  // the GGUF's bert.pooling_type
  const int32_t n_vocab = model->config().n_vocab;
  auto engine = Engine::create(*model, config(64));
  ASSERT_TRUE(engine.is_ok());
  const EngineInfo& info = (*engine)->info();
  EXPECT_TRUE(info.encoder && info.can_pool && !info.prefix_caching);
  EXPECT_EQ(info.max_model_len, 512);
  EXPECT_GE(info.max_num_batched_tokens, 512);
  std::vector<std::vector<float>> alone;
  const std::vector<int32_t> lens = {5, 40, 17, 70};  // 70 > the 64 asked: the budget was raised
  for (size_t i = 0; i < lens.size(); ++i)
    alone.push_back(embedding_of(**engine, prompt_of(lens[i], int32_t(i), n_vocab)));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < lens.size(); ++i) {
    auto s = (*engine)->submit(embed_request(prompt_of(lens[i], int32_t(i), n_vocab)));
    ASSERT_TRUE(s.is_ok());
    streams.push_back(*s);
  }
  for (size_t i = 0; i < lens.size(); ++i) {
    std::vector<EngineEvent> events;
    collect(*streams[i], &events);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].embedding, alone[i]) << "prompt " << i;
  }
  Request gen;
  gen.prompt = {101, 7592, 102};
  gen.max_tokens = 4;
  EXPECT_FALSE((*engine)->submit(gen).is_ok());
  const auto st = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kv_blocks_used, 0);
  EXPECT_EQ(st->n_embeddings, 8u);
}

// Pooling none on a decoder: one row per token, and (causal attention) row i
// is the last-token vector of the prompt's first i + 1 tokens; the engine runs
// such prompts whole (a budget below the prompt is raised) without the
// prefix cache, and generation beside them is unchanged.
TEST(EngineEmbedding, DecoderPoolingNoneGivesEveryTokensLastVector) {
  ThreadPool pool(2);
  auto model = load_file("random/qwen3.gguf", pool);
  ASSERT_NE(model, nullptr);
  const int32_t n_vocab = model->config().n_vocab;
  const int64_t d = model->config().n_embd;
  const std::vector<int32_t> prompt = prompt_of(37, 5, n_vocab);
  std::vector<std::vector<float>> last;  // last-token vectors of each prefix
  {
    ASSERT_TRUE(model->set_pooling(PoolingType::kLast).is_ok());
    auto engine = Engine::create(*model, config(512, false));
    ASSERT_TRUE(engine.is_ok());
    for (size_t n = 1; n <= prompt.size(); ++n)
      last.push_back(embedding_of(**engine, {prompt.begin(), prompt.begin() + std::ptrdiff_t(n)}));
  }
  ASSERT_TRUE(model->set_pooling(PoolingType::kNone).is_ok());
  auto engine = Engine::create(*model, config(16, true));  // asks for chunks and the cache
  ASSERT_TRUE(engine.is_ok());
  const EngineInfo& info = (*engine)->info();
  EXPECT_FALSE(info.prefix_caching);
  EXPECT_GE(info.max_num_batched_tokens, info.max_model_len);
  const std::vector<float> rows = embedding_of(**engine, prompt);
  ASSERT_EQ(rows.size(), prompt.size() * size_t(d));
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::vector<float> row(rows.begin() + std::ptrdiff_t(i * d),
                                 rows.begin() + std::ptrdiff_t((i + 1) * d));
    ASSERT_EQ(last[i].size(), size_t(d));
    EXPECT_EQ(row, last[i]) << "token " << i;  // batch invariance: the same bits
  }
  EXPECT_EQ(embedding_of(**engine, prompt), rows);  // again: the same bits (no cache hit)
  const auto st = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->kv_blocks_used, 0);
  EXPECT_EQ(st->prefix_cache_hits, 0u);
}

// Pooling none on the encoder: one row per token, whose mean is the mean
// pooling of the same prompt.
TEST(EngineEmbedding, EncoderPoolingNoneRowsAverageToMeanPooling) {
  ThreadPool pool(2);
  auto model = load_file("all-minilm-l6-v2.gguf", pool);
  ASSERT_NE(model, nullptr);
  const int32_t n_vocab = model->config().n_vocab;
  const int64_t d = model->config().n_embd;
  const std::vector<int32_t> prompt = prompt_of(23, 2, n_vocab);
  std::vector<float> mean;
  {
    auto engine = Engine::create(*model, config(64));
    ASSERT_TRUE(engine.is_ok());
    mean = embedding_of(**engine, prompt);
  }
  ASSERT_TRUE(model->set_pooling(PoolingType::kNone).is_ok());
  auto engine = Engine::create(*model, config(64));
  ASSERT_TRUE(engine.is_ok());
  const std::vector<float> rows = embedding_of(**engine, prompt);
  ASSERT_EQ(rows.size(), prompt.size() * size_t(d));
  for (int64_t k = 0; k < d; ++k) {
    double sum = 0;
    for (size_t i = 0; i < prompt.size(); ++i) sum += rows[i * size_t(d) + size_t(k)];
    EXPECT_NEAR(sum / double(prompt.size()), mean[size_t(k)], 1e-5) << k;
  }
}

// Mean and CLS pooling on a decoder: the prompt comes whole (no chunks, no
// prefix cache) and pools its rows as pooling none returns them: their mean
// (in double) and the first row, bit for bit.
TEST(EngineEmbedding, DecoderMeanAndClsPoolTheRowsOfPoolingNone) {
  ThreadPool pool(2);
  auto model = load_file("random/qwen3.gguf", pool);
  ASSERT_NE(model, nullptr);
  const int32_t n_vocab = model->config().n_vocab;
  const size_t d = size_t(model->config().n_embd);
  const std::vector<int32_t> prompt = prompt_of(41, 3, n_vocab);
  ASSERT_TRUE(model->set_pooling(PoolingType::kNone).is_ok());
  std::vector<float> rows;
  {
    auto engine = Engine::create(*model, config(512, false));
    ASSERT_TRUE(engine.is_ok());
    rows = embedding_of(**engine, prompt);
  }
  ASSERT_EQ(rows.size(), prompt.size() * d);
  for (PoolingType p : {PoolingType::kMean, PoolingType::kCls}) {
    SCOPED_TRACE(pooling_name(p));
    ASSERT_TRUE(model->set_pooling(p).is_ok());
    auto engine = Engine::create(*model, config(16, true));  // asks for chunks and the cache
    ASSERT_TRUE(engine.is_ok());
    EXPECT_FALSE((*engine)->info().prefix_caching);
    EXPECT_GE((*engine)->info().max_num_batched_tokens, (*engine)->info().max_model_len);
    const std::vector<float> got = embedding_of(**engine, prompt);
    ASSERT_EQ(got.size(), d);
    std::vector<float> want(rows.begin(), rows.begin() + std::ptrdiff_t(d));  // cls: row 0
    if (p == PoolingType::kMean) {
      pool_rows(PoolingType::kMean, rows.data(), int64_t(prompt.size()), int64_t(d), want.data());
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(embedding_of(**engine, prompt), got);  // again: no cache hit, the same bits
  }
}

}  // namespace
}  // namespace omnibus
