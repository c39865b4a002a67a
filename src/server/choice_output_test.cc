// ChoiceOutput and StreamPump on a tiny byte-level vocabulary: token ids are
// 4 + byte value, plus a few special tokens (0: <|endoftext|>, 1: <|im_end|>).
#include "server/choice_output.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/request_stream.h"
#include "server/openai_response.h"
#include "server/stream_pump.h"
#include "tokenizer/byte_level_test_vocab.h"

namespace omnibus::server {
namespace {

std::unique_ptr<Tokenizer> byte_tokenizer() {
  auto t = Tokenizer::from_vocab(
      byte_level_test_vocab({{"<|endoftext|>", 3}, {"<|im_end|>", 3}, {"<x>", 3}, {"<y>", 3}}));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

int32_t id(unsigned char c) { return 4 + c; }

EngineEvent token(int32_t tok, int32_t n, FinishReason f = FinishReason::kNone) {
  EngineEvent e;
  e.token = tok;
  e.logprob = -0.5f;
  e.top_logprobs = {{tok, -0.5f}};
  e.n_output_tokens = n;
  e.finish = f;
  return e;
}

// Feeds the bytes of `text` as tokens, the last with `last_finish`.
std::vector<ChoiceDelta> feed(ChoiceOutput& c, const std::string& text, FinishReason last_finish) {
  std::vector<ChoiceDelta> out;
  for (size_t i = 0; i < text.size(); ++i) {
    const FinishReason f = i + 1 == text.size() ? last_finish : FinishReason::kNone;
    out.push_back(c.on_event(token(id(static_cast<unsigned char>(text[i])), int32_t(i + 1), f)));
  }
  return out;
}

std::string joined(const std::vector<ChoiceDelta>& ds) {
  std::string s;
  for (const auto& d : ds) s += d.text;
  return s;
}

TEST(ChoiceOutput, LengthFinishPrintsEveryToken) {
  auto tok = byte_tokenizer();
  ChoiceOutput c(*tok, {}, false, 0);
  auto ds = feed(c, "hello", FinishReason::kLength);
  EXPECT_EQ(joined(ds), "hello");
  EXPECT_EQ(ds.back().finish_reason, "length");
  EXPECT_EQ(ds[3].finish_reason, "");
  EXPECT_EQ(c.finish_reason(), "length");
  EXPECT_EQ(c.n_tokens(), 5);
}

TEST(ChoiceOutput, EogTokenIsCountedNotPrinted) {
  auto tok = byte_tokenizer();
  ChoiceOutput c(*tok, {}, true, 0);
  feed(c, "hi", FinishReason::kNone);
  ChoiceDelta d = c.on_event(token(1, 3, FinishReason::kStop));
  EXPECT_EQ(d.text, "");
  EXPECT_TRUE(d.logprobs.empty());
  EXPECT_EQ(c.finish_reason(), "stop");
  EXPECT_EQ(c.n_tokens(), 3);
}

TEST(ChoiceOutput, MultibyteCharactersAreNeverSplit) {
  auto tok = byte_tokenizer();
  ChoiceOutput c(*tok, {}, false, 0);
  auto ds = feed(c, "a\xE2\x82\xAC", FinishReason::kLength);  // "a€"
  ASSERT_EQ(ds.size(), 4u);
  EXPECT_EQ(ds[0].text, "a");
  EXPECT_EQ(ds[1].text, "");
  EXPECT_EQ(ds[2].text, "");
  EXPECT_EQ(ds[3].text, "\xE2\x82\xAC");
}

TEST(ChoiceOutput, StopStringTruncatesAndCountsTokensUpToIt) {
  auto tok = byte_tokenizer();
  ChoiceOutput c(*tok, {"\nQ:"}, true, 10);
  auto ds = feed(c, "yes\nQ: more", FinishReason::kNone);
  EXPECT_EQ(joined(ds), "yes");
  EXPECT_TRUE(c.finished());
  EXPECT_EQ(c.finish_reason(), "stop");
  EXPECT_EQ(c.n_tokens(), 6);  // y e s \n Q :
  // Logprob entries for every consumed token, with offsets after the 10-byte base.
  size_t n_entries = 0;
  for (const auto& d : ds) n_entries += d.logprobs.size();
  EXPECT_EQ(n_entries, 6u);
  EXPECT_EQ(ds[0].logprobs[0].text_offset, 10u);
  EXPECT_EQ(ds[2].logprobs[0].text_offset, 12u);
  // Events after the stop are ignored.
  EXPECT_EQ(c.on_event(token(id('z'), 12)).text, "");
}

TEST(ChoiceOutput, HeldBackTailIsReleasedAtTheEnd) {
  auto tok = byte_tokenizer();
  ChoiceOutput c(*tok, {"STOP"}, false, 0);
  auto ds = feed(c, "aSTO", FinishReason::kLength);
  EXPECT_EQ(ds[0].text, "a");
  EXPECT_EQ(ds[1].text, "");
  EXPECT_EQ(ds[3].text, "STO");
  EXPECT_EQ(c.finish_reason(), "length");
}

TEST(ChoiceOutput, AbortWithoutToken) {
  auto tok = byte_tokenizer();
  ChoiceOutput c(*tok, {}, false, 0);
  EngineEvent e;
  e.finish = FinishReason::kAbort;
  EXPECT_EQ(c.on_event(e).text, "");
  EXPECT_EQ(c.finish_reason(), "abort");
}

TEST(TokenDisplay, PartialCharactersAreShownAsBytes) {
  auto tok = byte_tokenizer();
  EXPECT_EQ(token_display(*tok, id('a')), "a");
  EXPECT_EQ(token_display(*tok, id(0xE2)), "bytes:\\xe2");
  EXPECT_TRUE(is_valid_utf8("\xE2\x82\xAC"));
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));  // overlong
}

// The engine's prompt logprobs feed both views: echo + logprobs (the
// completions format) and prompt_logprobs (vLLM's), each cut to its own k.
TEST(Logprobs, PromptLogprobsFeedEchoAndPromptLogprobs) {
  auto tok = byte_tokenizer();
  const std::vector<int32_t> ids = {id('h'), id('i'), id('!')};
  std::vector<PromptLogprob> scored(2);
  scored[0] = {id('i'), -1.5f, 2, {{id('x'), -0.5f}, {id('i'), -1.5f}, {id('y'), -2.0f}}};
  scored[1] = {id('!'), -3.0f, 4, {{id('a'), -0.25f}, {id('b'), -1.0f}, {id('c'), -2.5f}}};

  const std::vector<TokenLogprob> one = prompt_token_logprobs(*tok, ids, scored, 1);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_FALSE(one[0].has_logprob);
  EXPECT_EQ(one[1].rank, 2);
  ASSERT_EQ(one[1].top.size(), 1u);
  EXPECT_EQ(one[2].text_offset, 2u);
  nlohmann::json echo;
  append_completion_logprobs(*tok, one, echo);
  EXPECT_EQ(echo["tokens"], nlohmann::json({"h", "i", "!"}));
  EXPECT_EQ(echo["token_logprobs"], nlohmann::json({nullptr, -1.5, -3.0}));
  EXPECT_EQ(echo["top_logprobs"][1], nlohmann::json({{"x", -0.5}}));

  const nlohmann::json pl = prompt_logprobs_json(*tok, prompt_token_logprobs(*tok, ids, scored, 2));
  ASSERT_EQ(pl.size(), 3u);
  EXPECT_TRUE(pl[0].is_null());
  // The prompt token is among the top 2 at rank 2: two entries.
  ASSERT_EQ(pl[1].size(), 2u);
  const nlohmann::json& i_entry = pl[1][std::to_string(id('i'))];
  EXPECT_EQ(i_entry["logprob"], -1.5);
  EXPECT_EQ(i_entry["rank"], 2);
  EXPECT_EQ(i_entry["decoded_token"], "i");
  EXPECT_EQ(pl[1][std::to_string(id('x'))]["rank"], 1);
  // Not among them (rank 4): the top 2 plus the token itself.
  ASSERT_EQ(pl[2].size(), 3u);
  EXPECT_EQ(pl[2][std::to_string(id('!'))]["rank"], 4);
  EXPECT_EQ(pl[2][std::to_string(id('!'))]["logprob"], -3.0);
  EXPECT_EQ(pl[2][std::to_string(id('b'))]["rank"], 2);
  EXPECT_FALSE(pl[2].contains(std::to_string(id('c'))));

  // Positions the engine has not scored have no logprob.
  EXPECT_FALSE(prompt_token_logprobs(*tok, ids, {}, 2)[1].has_logprob);
}

TEST(Logprobs, CompletionAndChatFormats) {
  auto tok = byte_tokenizer();
  std::vector<TokenLogprob> entries = {{id('h'), false, 0.0f, {}, 0, 0},
                                       {id('i'), true, -1.5f, {{id('i'), -1.5f}}, 1, 0}};
  nlohmann::json comp;
  append_completion_logprobs(*tok, entries, comp);
  EXPECT_EQ(comp["tokens"], nlohmann::json({"h", "i"}));
  EXPECT_TRUE(comp["token_logprobs"][0].is_null());
  EXPECT_EQ(comp["token_logprobs"][1], -1.5);
  EXPECT_EQ(comp["top_logprobs"][1]["i"], -1.5);
  EXPECT_EQ(comp["text_offset"], nlohmann::json({0, 1}));
  nlohmann::json chat;
  append_chat_logprobs(*tok, {entries[1]}, chat);
  EXPECT_EQ(chat["content"][0]["token"], "i");
  EXPECT_EQ(chat["content"][0]["bytes"], nlohmann::json({int('i')}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][0]["logprob"], -1.5);
  const nlohmann::json u = usage_json(5, 7, 2);
  EXPECT_EQ(u["total_tokens"], 12);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(StreamPump, DeliversEventsInOrderAndDropsFinishedStreams) {
  StreamPump pump;
  auto s = std::make_shared<RequestStream>(1, 1, RequestStream::Clock::now());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> seen;
  bool done = false;
  pump.add(s, [&](std::vector<EngineEvent>& events) {
    std::lock_guard<std::mutex> lock(mu);
    for (const EngineEvent& e : events) {
      seen.push_back(e.token);
      done = done || e.final;
    }
    cv.notify_all();
  });
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) {
      EngineEvent e = token(i, i + 1);
      e.final = i == 99;
      s->push(std::move(e));
    }
  });
  producer.join();
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; }));
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[size_t(i)], i);
  lock.unlock();
  // The entry is dropped after its final event's handler returned.
  EXPECT_TRUE(pump.wait_empty(std::chrono::seconds(30)));
  EXPECT_EQ(pump.size(), 0u);
}

}  // namespace
}  // namespace omnibus::server
