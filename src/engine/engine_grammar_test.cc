// The engine with structured output (Request::grammar): every constrained
// output follows its grammar and ends where the grammar may, at temperature 1
// too; n > 1, max_tokens, ignore_eos and a grammar the vocabulary cannot
// continue behave as documented; and a constrained sequence does not change
// an unconstrained neighbour's tokens (batch invariance).
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_model_testing.h"
#include "engine/speculation_testing.h"
#include "grammar/grammar.h"
#include "grammar/token_mask.h"

namespace omnibus {
namespace {

constexpr int32_t kVocab = 64;
constexpr int32_t kEog = 63;

// Digits 0-9, letters a-z, JSON punctuation, a few multi-byte pieces, and
// one end token. The fake model's logits are hash noise, so at temperature 1
// every allowed token gets its turn.
std::shared_ptr<const grammar::VocabTrie> test_vocab() {
  grammar::VocabBytes v;
  v.pieces.resize(kVocab);
  v.maskable.assign(kVocab, true);
  for (int i = 0; i < 10; ++i) v.pieces[size_t(i)] = std::string(1, char('0' + i));
  for (int i = 0; i < 26; ++i) v.pieces[size_t(10 + i)] = std::string(1, char('a' + i));
  const char* more[] = {"{",   "}",  "\"", ":",   ",",   " ",  "ab",
                        "abc", "12", "x1", "\"a", "\":", "},", "00"};
  for (size_t i = 0; i < std::size(more); ++i) v.pieces[36 + i] = more[i];
  for (int i = 36 + int(std::size(more)); i < kVocab; ++i)
    v.maskable[size_t(i)] = false;  // control
  v.pieces[kEog] = "";
  v.eog_ids = {kEog};
  return std::make_shared<const grammar::VocabTrie>(std::move(v));
}

std::shared_ptr<const grammar::TokenMasker> masker(const std::string& ebnf) {
  auto g = grammar::parse_ebnf(ebnf);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return std::make_shared<const grammar::TokenMasker>(std::move(g).value(), test_vocab());
}

EngineConfig config(FakeModel& m) {
  EngineConfig c;
  c.block_size = 4;
  c.kv_format = KvFormat::kF32;
  c.kv_cache_bytes = int64_t(m.kv_geometry(4, KvFormat::kF32).bytes_per_block()) * 512;
  c.max_num_batched_tokens = 512;
  c.eog_ids = {kEog};
  c.log_startup = false;
  return c;
}

// The outputs are checked without the grammar code: a pattern here is a run
// of character classes, each repeated [lo, hi] times (adjacent classes are
// disjoint, so matching greedily decides). std::regex would do, but GCC 12
// warns falsely inside it in sanitizer builds.
struct CharRun {
  std::string chars;
  int lo, hi;
};
constexpr int kMany = 1 << 30;
const std::string kDigits = "0123456789";
const std::string kLower = "abcdefghijklmnopqrstuvwxyz";

bool matches(const std::string& text, const std::vector<CharRun>& runs) {
  size_t pos = 0;
  for (const CharRun& r : runs) {
    int n = 0;
    while (pos < text.size() && n < r.hi && r.chars.find(text[pos]) != std::string::npos) {
      ++pos;
      ++n;
    }
    if (n < r.lo) return false;
  }
  return pos == text.size();
}

std::string text_of(const std::vector<int32_t>& ids) {
  auto trie = test_vocab();
  std::string s;
  for (int32_t id : ids) {
    if (id != kEog) s += trie->vocab().pieces[size_t(id)];
  }
  return s;
}

Request constrained(std::shared_ptr<const grammar::TokenMasker> g, uint64_t seed,
                    int32_t max_tokens = 64) {
  Request r;
  r.prompt = {1, 2, 3, int32_t(seed % 50)};
  r.max_tokens = max_tokens;
  r.sampling = seeded(seed);
  r.grammar = std::move(g);
  return r;
}

TEST(EngineGrammar, EveryOutputMatchesAndEndsWithTheEndToken) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  auto g = masker("root ::= [0-9]{2,5} \"x\" [a-c]*  \",\"\n");
  const std::vector<CharRun> want = {{kDigits, 2, 5}, {"x", 1, 1}, {"abc", 0, kMany}, {",", 1, 1}};
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    auto s = (*engine)->submit(constrained(g, seed));
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  for (auto& s : streams) {
    const SeqResult r = collect(*s)[0];
    ASSERT_EQ(r.finish, FinishReason::kStop);
    ASSERT_FALSE(r.tokens.empty());
    EXPECT_EQ(r.tokens.back(), kEog);
    EXPECT_TRUE(matches(text_of(r.tokens), want)) << text_of(r.tokens);
  }
  const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_GT(st->structured_masks, 0u);
  EXPECT_EQ(st->structured_rejections, 0u);
}

TEST(EngineGrammar, NSequencesEachFollowTheGrammar) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  auto g = masker("root ::= \"{\" \"\\\"\" [a-z]+ \"\\\":\" [0-9]+ \"}\"\n");
  const std::vector<CharRun> want = {{"{", 1, 1},  {"\"", 1, 1}, {kLower, 1, kMany},
                                     {"\"", 1, 1}, {":", 1, 1},  {kDigits, 1, kMany},
                                     {"}", 1, 1}};
  Request r = constrained(g, 7);
  r.n = 6;
  auto s = (*engine)->submit(std::move(r));
  ASSERT_TRUE(s.is_ok());
  const auto results = collect(**s);
  ASSERT_EQ(results.size(), 6u);
  std::set<std::string> distinct;
  for (const auto& [i, res] : results) {
    EXPECT_EQ(res.finish, FinishReason::kStop) << i;
    EXPECT_TRUE(matches(text_of(res.tokens), want)) << text_of(res.tokens);
    distinct.insert(text_of(res.tokens));
  }
  EXPECT_GT(distinct.size(), 1u) << "six seeded samples at temperature 1 all alike";
}

TEST(EngineGrammar, MaxTokensCutsAValidPrefixWithLength) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  auto g = masker("root ::= [a-z]{30} \"!\"\n");  // longer than max_tokens allows
  auto s = (*engine)->submit(constrained(g, 3, /*max_tokens=*/5));
  ASSERT_TRUE(s.is_ok());
  const SeqResult r = collect(**s)[0];
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.tokens.size(), 5u);
  EXPECT_TRUE(matches(text_of(r.tokens), {{kLower, 1, kMany}})) << text_of(r.tokens);
}

TEST(EngineGrammar, AGrammarEndsTheOutputEvenWithIgnoreEos) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  Request r = constrained(masker("root ::= \"abc\" | \"ab\" \"c\"\n"), 11);
  r.ignore_eos = true;
  auto s = (*engine)->submit(std::move(r));
  ASSERT_TRUE(s.is_ok());
  const SeqResult res = collect(**s)[0];
  EXPECT_EQ(res.finish, FinishReason::kStop);
  EXPECT_EQ(text_of(res.tokens), "abc");
  EXPECT_EQ(res.tokens.back(), kEog);
}

TEST(EngineGrammar, AGrammarTheVocabularyCannotSpellEndsTheSequence) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  auto s = (*engine)->submit(constrained(masker("root ::= \"Q\"\n"), 5));  // no token has a 'Q'
  ASSERT_TRUE(s.is_ok());
  const SeqResult r = collect(**s)[0];
  // Issue 34: this was kStop, though "stop" promises an output that matches.
  EXPECT_EQ(r.finish, FinishReason::kGrammarDeadEnd);
  EXPECT_EQ(r.tokens.size(), 1u);  // the rejected token, which the server does not print
  // The stats are published after the step that pushed the event: wait for them.
  const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->structured_rejections, 1u);
}

TEST(EngineGrammar, AConstrainedNeighbourDoesNotChangeAnotherSequencesTokens) {
  FakeModel model(kVocab);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  Request free_text;
  free_text.prompt = {5, 6, 7};
  free_text.max_tokens = 24;
  free_text.ignore_eos = true;
  free_text.sampling = seeded(99);
  auto alone = (*engine)->submit(free_text);
  ASSERT_TRUE(alone.is_ok());
  const std::vector<int32_t> want = collect(**alone)[0].tokens;

  ForwardHold hold(&model);
  std::vector<std::shared_ptr<RequestStream>> neighbours;
  auto g = masker("root ::= [0-9]+ \",\"\n");
  for (uint64_t seed = 0; seed < 8; ++seed)
    neighbours.push_back(*(*engine)->submit(constrained(g, seed)));
  auto together = (*engine)->submit(free_text);
  ASSERT_TRUE(together.is_ok());
  hold.release();
  EXPECT_EQ(collect(**together)[0].tokens, want);
  for (auto& n : neighbours) collect(*n);
}

// Preempted constrained sequences resume where they were: their matcher
// belongs to the output, not the KV blocks, so the recompute leaves it as is
// and the outputs equal those of a pool large enough for all of them.
TEST(EngineGrammar, PreemptionKeepsEachSequencesGrammarState) {
  auto g = masker("root ::= [a-z]{4,12} \",\" [0-9]{4,12} \"}\"\n");
  const std::vector<CharRun> want = {{kLower, 4, 12}, {",", 1, 1}, {kDigits, 4, 12}, {"}", 1, 1}};
  auto run = [&](int32_t n_blocks, uint64_t* preemptions) {
    FakeModel model(kVocab);
    EngineConfig c = config(model);
    c.kv_cache_bytes = int64_t(model.kv_geometry(4, KvFormat::kF32).bytes_per_block()) * n_blocks;
    auto engine = Engine::create(model, c);
    EXPECT_TRUE(engine.is_ok());
    std::vector<std::shared_ptr<RequestStream>> streams;
    {
      ForwardHold hold(&model);  // all queued before any step: they compete for the pool
      for (uint64_t seed = 0; seed < 8; ++seed)
        streams.push_back(*(*engine)->submit(constrained(g, seed, 32)));
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& s : streams) {
      const SeqResult r = collect(*s)[0];
      EXPECT_EQ(r.finish, FinishReason::kStop);
      EXPECT_TRUE(matches(text_of(r.tokens), want)) << text_of(r.tokens);
      out.push_back(r.tokens);
    }
    const std::optional<EngineStats> st = (*engine)->wait_idle(std::chrono::seconds(30));
    EXPECT_TRUE(st.has_value());
    *preemptions = st ? st->n_preemptions : 0;
    return out;
  };
  uint64_t tight_preemptions = 0, roomy_preemptions = 0;
  const auto tight = run(20, &tight_preemptions);  // 80 slots; each request needs up to 36
  const auto roomy = run(512, &roomy_preemptions);
  EXPECT_GT(tight_preemptions, 0u);
  EXPECT_EQ(roomy_preemptions, 0u);
  EXPECT_EQ(tight, roomy);
}

TEST(EngineGrammar, AGrammarOverAnotherVocabularyIsRefused) {
  FakeModel model(kVocab + 1);
  auto engine = Engine::create(model, config(model));
  ASSERT_TRUE(engine.is_ok());
  auto s = (*engine)->submit(constrained(masker("root ::= \"a\"\n"), 1));
  EXPECT_FALSE(s.is_ok());
}

// Speculation on constrained sequences (issue 36): drafts are cut where the
// grammar refuses a token, the rest verified as usual, and every output,
// logprob and finish is plain decoding's, greedy and seeded, n = 2 too. The
// drafts are plain decoding's own continuations with one position changed
// (speculation_testing.h), so whole, partial and refused drafts all occur,
// and some changed tokens are ones the grammar refuses.
TEST(EngineGrammar, SpeculationKeepsConstrainedOutputsExact) {
  FakeModel model(kVocab);
  EngineConfig cfg = config(model);
  cfg.spec_cost_ratio_for_testing = 0;  // draft lengths from acceptance alone
  const auto digits = masker("root ::= [0-9]{2,5} \"x\" [a-c]*  \",\"\n");
  const auto object = masker("root ::= \"{\" \"\\\"\" [a-z]+ \"\\\":\" [0-9]+ \"}\"\n");
  std::vector<Request> reqs;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    Request r = constrained(seed % 2 == 0 ? digits : object, seed, 40);
    if (seed % 3 == 0) r.sampling = greedy();
    if (seed % 5 == 1) r.n = 2;
    r.sampling.n_logprobs = seed % 4 == 2 ? 2 : -1;
    reqs.push_back(std::move(r));
  }
  const speculation_testing::RunResult plain = speculation_testing::run(model, cfg, reqs, nullptr);
  const speculation_testing::Oracle oracle = speculation_testing::oracle_of(reqs, plain.out);
  const speculation_testing::RunResult spec = speculation_testing::run(model, cfg, reqs, &oracle);
  ASSERT_EQ(spec.info.speculative, SpeculativeKind::kNgram);
  speculation_testing::expect_same(spec.out, plain.out);
  for (const auto& seqs : plain.out) {
    for (const auto& [index, t] : seqs) EXPECT_EQ(t.finish, FinishReason::kStop);
  }
  EXPECT_GT(spec.stats.spec_drafts, 0u);
  EXPECT_GT(spec.stats.spec_accepted_tokens, 0u);
  EXPECT_LT(spec.stats.spec_accepted_tokens, spec.stats.spec_draft_tokens);
  EXPECT_GT(spec.stats.spec_grammar_cut_tokens, 0u);
  EXPECT_LT(spec.stats.n_steps, plain.stats.n_steps);
  EXPECT_EQ(spec.stats.structured_rejections, 0u);
}

}  // namespace
}  // namespace omnibus
