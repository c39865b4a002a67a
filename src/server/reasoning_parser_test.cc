#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <random>

namespace omnibus::server {
namespace {

struct Case {
  ReasoningFormat format;
  bool in_reasoning;  // starts_in_reasoning() of the prompt
  std::string text;
  std::string reasoning;
  std::string content;
};

const std::vector<Case>& cases() {
  using F = ReasoningFormat;
  static const std::vector<Case> kCases = {
      // qwen3: thinks only when the output opens the block
      {F::kQwen3, false, "<think>\nLet me see.\n</think>\n\nThe answer is 4.", "Let me see.",
       "The answer is 4."},
      {F::kQwen3, false, "The answer is 4.", "", "The answer is 4."},
      {F::kQwen3, false, "  \n The answer.", "", "  \n The answer."},  // untouched
      {F::kQwen3, false, "\n<think>a b</think>c", "a b", "c"},
      {F::kQwen3, false, "<think>\n\n</think>\n\nHi", "", "Hi"},  // the no-think form
      {F::kQwen3, false, "<think>unclosed, cut by max_tokens  ", "unclosed, cut by max_tokens", ""},
      {F::kQwen3, false, "<think>x</thi", "x</thi", ""},  // a partial tag is text
      {F::kQwen3, false, "<thin", "", "<thin"},
      {F::kQwen3, false, "a</think>b", "", "a</think>b"},  // no open tag: content
      {F::kQwen3, false, "<think>r</think>c <think>d</think>", "r", "c <think>d</think>"},
      {F::kQwen3, false, "<think> in  ner\n\nspace </think> out  ", "in  ner\n\nspace", "out  "},
      {F::kQwen3, false, "", "", ""},
      {F::kQwen3, false, "<think>", "", ""},
      // qwen3 after a prompt that opened the block
      {F::kQwen3, true, "\nstill thinking</think>\nanswer", "still thinking", "answer"},
      {F::kQwen3, true, "<think>x</think>y", "x", "y"},
      // deepseek_r1: starts inside the block (unless the prompt closed one)
      {F::kDeepSeekR1, true, "Okay, 2+2.\n</think>\n\n4", "Okay, 2+2.", "4"},
      {F::kDeepSeekR1, true, "<think>\nhmm\n</think>4", "hmm", "4"},
      {F::kDeepSeekR1, true, "no end tag at all", "no end tag at all", ""},
      {F::kDeepSeekR1, true, "</think>direct", "", "direct"},
      {F::kDeepSeekR1, true, "   ", "", ""},
      {F::kDeepSeekR1, true, "<<think>x", "<<think>x", ""},
      {F::kDeepSeekR1, true, "a </think", "a </think", ""},
      {F::kDeepSeekR1, true, "a <</think>b", "a <", "b"},
      {F::kDeepSeekR1, true, "\xE4\xBD\xA0</think>\xE5\xA5\xBD", "\xE4\xBD\xA0", "\xE5\xA5\xBD"},
  };
  return kCases;
}

TEST(ReasoningParser, WholeText) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.text);
    const ReasoningDelta d = split_reasoning(c.format, c.in_reasoning, c.text);
    EXPECT_EQ(d.reasoning, c.reasoning);
    EXPECT_EQ(d.content, c.content);
  }
}

// Any split into deltas (here: every byte alone, and random cuts) yields the
// same split as the whole text, and reasoning is never released after content.
TEST(ReasoningParser, StreamingEqualsWholeForAnySplit) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    for (int trial = 0; trial < 60; ++trial) {
      SCOPED_TRACE(c.text + " trial " + std::to_string(trial));
      ReasoningSplitter s(c.format, c.in_reasoning);
      std::string reasoning, content;
      bool saw_content = false;
      auto take = [&](const ReasoningDelta& d) {
        EXPECT_TRUE(d.reasoning.empty() || !saw_content);
        reasoning += d.reasoning;
        content += d.content;
        saw_content = saw_content || !d.content.empty();
      };
      size_t i = 0;
      while (i < c.text.size()) {
        const size_t n = trial == 0 ? 1 : 1 + rng() % 5;
        take(s.push(std::string_view(c.text).substr(i, n)));
        i += n;
      }
      take(s.finish());
      EXPECT_TRUE(s.finished());
      EXPECT_EQ(reasoning, c.reasoning);
      EXPECT_EQ(content, c.content);
    }
  }
}

// Text is released as soon as it is certain: reasoning streams while the block
// is open, holding back only a partial tag and the whitespace before it.
TEST(ReasoningParser, ReleasesEarly) {
  ReasoningSplitter s(ReasoningFormat::kQwen3, false);
  EXPECT_EQ(s.push("<thi").reasoning, "");
  EXPECT_EQ(s.push("nk>\nStep one").reasoning, "Step one");
  EXPECT_EQ(s.push(" then \n</").reasoning, " then");
  EXPECT_FALSE(s.reasoning_ended());
  ReasoningDelta d = s.push("think>\n\nAns");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Ans");
  EXPECT_TRUE(s.reasoning_ended());
  EXPECT_EQ(s.push("wer").content, "wer");
  EXPECT_EQ(s.push("").content, "");
  d = s.finish();
  EXPECT_EQ(d.reasoning + d.content, "");
}

TEST(ReasoningParser, WhereTheOutputStarts) {
  using F = ReasoningFormat;
  const std::string open = "<|im_start|>assistant\n<think>\n";
  const std::string closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  const std::string plain = "<|im_start|>assistant\n";
  EXPECT_TRUE(starts_in_reasoning(F::kQwen3, open));
  EXPECT_FALSE(starts_in_reasoning(F::kQwen3, closed));
  EXPECT_FALSE(starts_in_reasoning(F::kQwen3, plain));
  EXPECT_TRUE(starts_in_reasoning(F::kDeepSeekR1, open));
  EXPECT_FALSE(starts_in_reasoning(F::kDeepSeekR1, closed));  // the no-think form
  EXPECT_TRUE(starts_in_reasoning(F::kDeepSeekR1, plain));
  EXPECT_FALSE(starts_in_reasoning(F::kNone, open));
  EXPECT_TRUE(prompt_closes_thinking("x</think> \n"));
  EXPECT_FALSE(prompt_closes_thinking("x</think>y"));
}

TEST(ReasoningParser, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_TRUE(prompt_opens_thinking("<think>"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_thinking("<think>text already"));
  EXPECT_FALSE(prompt_opens_thinking(""));
}

TEST(ReasoningParser, FormatNamesAndTemplates) {
  for (ReasoningFormat f :
       {ReasoningFormat::kNone, ReasoningFormat::kQwen3, ReasoningFormat::kDeepSeekR1}) {
    EXPECT_EQ(reasoning_format_from_name(reasoning_format_name(f)), f);
  }
  EXPECT_EQ(reasoning_format_from_name("auto"), std::nullopt);
  EXPECT_EQ(reasoning_format_from_name("Qwen3"), std::nullopt);
  EXPECT_EQ(reasoning_format_for_template("{{ '<think>\\n\\n</think>\\n\\n' }}"),
            ReasoningFormat::kQwen3);
  EXPECT_EQ(
      reasoning_format_for_template("{{'<\xEF\xBD\x9C"
                                    "Assistant\xEF\xBD\x9C><think>\\n'}} x.split('</think>')"),
      ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(reasoning_format_for_template("{{ '<|im_start|>assistant\\n' }}"),
            ReasoningFormat::kNone);
  EXPECT_EQ(split_reasoning(ReasoningFormat::kNone, true, "<think>x</think>").content,
            "<think>x</think>");
}

}  // namespace
}  // namespace omnibus::server
