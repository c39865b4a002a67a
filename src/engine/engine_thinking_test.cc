// The engine with a thinking block (Request::thinking, engine/thinking.h):
// the budget forces the closing tag after exactly `budget` sampled tokens
// inside the block, a grammar constrains only the answer after the block,
// end tokens wait for the answer, and n_reasoning_tokens counts the block.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"
#include "engine/thinking.h"
#include "grammar/grammar.h"
#include "grammar/token_mask.h"

namespace omnibus {
namespace {

constexpr int32_t kVocab = 64;
constexpr int32_t kOpen = 60;
constexpr int32_t kClose = 61;
constexpr int32_t kEog = 63;

std::shared_ptr<const grammar::TokenMasker> digits_grammar() {
  grammar::VocabBytes v;
  v.pieces.resize(kVocab);
  v.maskable.assign(kVocab, true);
  for (int i = 0; i < 10; ++i) v.pieces[size_t(i)] = std::string(1, char('0' + i));
  for (int i = 10; i < 36; ++i) v.pieces[size_t(i)] = std::string(1, char('a' + i - 10));
  for (int i = 36; i < kVocab; ++i)
    v.maskable[size_t(i)] = false;  // control: the tags, the end token
  v.pieces[kEog] = "";
  v.eog_ids = {kEog};
  auto g = grammar::parse_ebnf("root ::= [0-9]{3}\n");
  EXPECT_TRUE(g.is_ok());
  return std::make_shared<const grammar::TokenMasker>(
      std::move(g).value(), std::make_shared<const grammar::VocabTrie>(std::move(v)));
}

EngineConfig config(FakeModel& m) {
  EngineConfig c;
  c.block_size = 4;
  c.kv_format = KvFormat::kF32;
  c.kv_cache_bytes = int64_t(m.kv_geometry(4, KvFormat::kF32).bytes_per_block()) * 256;
  c.max_num_batched_tokens = 256;
  c.eog_ids = {kEog};
  c.log_startup = false;
  return c;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<int32_t> n_reasoning;  // per event
  FinishReason finish = FinishReason::kNone;
};

Outcome run(Engine& engine, Request r) {
  auto s = engine.submit(std::move(r));
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  Outcome out;
  if (!s.is_ok()) return out;
  std::vector<EngineEvent> events;
  SeqResult res = collect(**s, &events)[0];
  out.tokens = res.tokens;
  out.finish = res.finish;
  for (const EngineEvent& e : events) {
    if (e.token >= 0) out.n_reasoning.push_back(e.n_reasoning_tokens);
  }
  return out;
}

Request thinking_request(uint64_t seed, bool starts_open, int32_t budget) {
  Request r;
  r.prompt = {1, 2, 3, int32_t(seed % 40)};
  r.max_tokens = 24;
  r.ignore_eos = true;
  r.sampling = seeded(seed);
  auto rule = std::make_shared<ThinkingRule>();
  rule->open = {kOpen};
  rule->close = {kClose};
  rule->starts_open = starts_open;
  rule->budget = budget;
  r.thinking = rule;
  return r;
}

TEST(EngineThinking, TheBudgetForcesTheCloseAfterExactlyBudgetTokens) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  for (int32_t budget : {0, 1, 5, 9}) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      Request r = thinking_request(seed, /*starts_open=*/true, budget);
      r.sampling.logit_bias = {{kClose, -100.0f}};  // the model would never close it
      const Outcome out = run(**engine, std::move(r));
      ASSERT_EQ(out.tokens.size(), 24u);
      for (int32_t i = 0; i < budget; ++i) EXPECT_NE(out.tokens[size_t(i)], kClose);
      EXPECT_EQ(out.tokens[size_t(budget)], kClose) << "budget " << budget;
      EXPECT_EQ(std::count(out.tokens.begin(), out.tokens.end(), kClose), 1);
      EXPECT_EQ(out.n_reasoning.back(), budget + 1);  // the block: budget tokens + the tag
      EXPECT_EQ(out.n_reasoning[size_t(budget)], budget + 1);
    }
  }
}

TEST(EngineThinking, TheOutputOpensTheBlockItselfAndAnEarlyCloseIsTheModels) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  Request r = thinking_request(3, /*starts_open=*/false, /*budget=*/4);
  r.sampling.logit_bias = {{kOpen, 100.0f}, {kClose, -100.0f}};
  Outcome out = run(**engine, std::move(r));
  ASSERT_EQ(out.tokens.size(), 24u);
  EXPECT_EQ(out.tokens[0], kOpen);
  EXPECT_EQ(out.tokens[5], kClose);  // <think> + 4 + </think>
  EXPECT_EQ(out.n_reasoning.back(), 6);

  // The model closes before the budget: nothing is forced, the block ends there.
  r = thinking_request(4, /*starts_open=*/true, /*budget=*/10);
  r.sampling.logit_bias = {{kClose, 100.0f}};
  out = run(**engine, std::move(r));
  EXPECT_EQ(out.tokens[0], kClose);
  EXPECT_EQ(out.n_reasoning.back(), 1);

  // An output that does not open the block has no reasoning tokens and no forcing.
  r = thinking_request(5, /*starts_open=*/false, /*budget=*/2);
  r.sampling.logit_bias = {{kOpen, -100.0f}, {kClose, -100.0f}};
  out = run(**engine, std::move(r));
  EXPECT_EQ(std::count(out.tokens.begin(), out.tokens.end(), kClose), 0);
  EXPECT_EQ(out.n_reasoning.back(), 0);
}

TEST(EngineThinking, AGrammarConstrainsOnlyTheAnswerAfterTheBlock) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  auto g = digits_grammar();
  bool thought_freely = false;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Request r = thinking_request(seed, /*starts_open=*/true, /*budget=*/6);
    r.ignore_eos = false;
    r.grammar = g;
    r.sampling.logit_bias = {{kClose, -100.0f},
                             {kEog, 5.0f}};  // eager to stop: not inside the block
    const Outcome out = run(**engine, std::move(r));
    ASSERT_EQ(out.finish, FinishReason::kStop) << seed;
    ASSERT_EQ(out.tokens.size(), 6u + 1u + 3u + 1u) << seed;
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_NE(out.tokens[i], kEog);
      thought_freely = thought_freely || out.tokens[i] >= 10;
    }
    EXPECT_EQ(out.tokens[6], kClose);
    for (size_t i = 7; i < 10; ++i)
      EXPECT_LT(out.tokens[i], 10) << "answer token " << out.tokens[i];
    EXPECT_EQ(out.tokens[10], kEog);
    EXPECT_EQ(out.n_reasoning.back(), 7);
  }
  EXPECT_TRUE(thought_freely) << "the grammar leaked into the thinking block";

  // No block opened: the grammar holds from the first token (which may have been <think>).
  Request r = thinking_request(1, /*starts_open=*/false, /*budget=*/3);
  r.ignore_eos = false;
  r.grammar = g;
  r.sampling.logit_bias = {{kOpen, -100.0f}};
  const Outcome out = run(**engine, std::move(r));
  ASSERT_EQ(out.tokens.size(), 4u);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(out.tokens[i], 10);
  EXPECT_EQ(out.n_reasoning.back(), 0);
}

TEST(EngineThinking, BadRulesAreRefused) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  Request r = thinking_request(1, false, 2);
  auto rule = std::make_shared<ThinkingRule>(*r.thinking);
  rule->close = {kVocab};
  r.thinking = rule;
  EXPECT_FALSE((*engine)->submit(r).is_ok());
  rule->close = {};
  EXPECT_FALSE((*engine)->submit(r).is_ok());
  rule->close = {kClose};
  rule->open = {};
  EXPECT_FALSE((*engine)->submit(r).is_ok());
}

}  // namespace
}  // namespace omnibus
