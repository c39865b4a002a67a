// Reasoning parser: split a reasoning model's output text into its thinking
// part (`reasoning`) and its answer (`content`), as the text streams in.
//
// Formats (--reasoning-parser; "auto" picks one from the chat template):
//   qwen3        "<think>REASONING</think>CONTENT". The output thinks only when
//                it starts with "<think>" (leading whitespace allowed) or the
//                prompt already opened the block; otherwise it is all
//                content, unchanged.
//   deepseek_r1  "[<think>]REASONING</think>CONTENT": the output starts inside
//                the block (a leading "<think>" is dropped) unless the prompt
//                closed one at its end (a template's no-think form).
//   none         everything is content (no ReasoningSplitter is made).
// The two differ only in where an output starts: starts_in_reasoning(format,
// prompt) says it for a rendered prompt; the splitter and the engine's
// ThinkingRule take that answer.
//
// The split, exactly:
//   - the tags are not text of either part;
//   - reasoning is the text between the tags with leading and trailing
//     whitespace (' ', '\t', '\r', '\n') removed; a block never closed (cut by
//     max_tokens) is reasoning up to the end of the output;
//   - content is the text after "</think>" with its leading whitespace
//     removed, otherwise byte for byte (a later "<think>" is content);
//   - output that does not think is content byte for byte.
//
// ReasoningSplitter is the one implementation. It holds back only what may
// still change meaning (a partial tag, whitespace that may end the
// reasoning), so feeding any split of a text into push() and then calling
// finish() yields the same concatenated reasoning and content as
// split_reasoning() on the whole text. Downstream parsers (tool calls,
// structured output) read only the content.
//
// Thread-safety: ReasoningSplitter: one choice, one thread. The free
// functions are pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace omnibus::server {

enum class ReasoningFormat { kNone, kQwen3, kDeepSeekR1 };

// What one push()/finish() releases, in output order: any reasoning comes
// before any content.
struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningSplitter {
 public:
  // in_reasoning: the output starts inside the thinking block
  // (starts_in_reasoning()); otherwise it thinks only if it opens with "<think>".
  // REQUIRES: format != kNone.
  ReasoningSplitter(ReasoningFormat format, bool in_reasoning);

  // REQUIRES: !finished().
  ReasoningDelta push(std::string_view text);
  // The end of the output: releases what was held back.
  ReasoningDelta finish();

  bool finished() const { return finished_; }
  // True once "</think>" was seen: what follows is the answer.
  bool reasoning_ended() const {
    return state_ == State::kContentLead || state_ == State::kContent;
  }

 private:
  enum class State { kStart, kReasoningLead, kReasoning, kContentLead, kContent };
  void run(bool final, ReasoningDelta& out);

  const bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string buf_;  // text not yet released
  bool finished_ = false;
};

// The whole output at once (same result as any streaming split).
ReasoningDelta split_reasoning(ReasoningFormat format, bool in_reasoning, std::string_view text);

// True when `prompt` ends inside a thinking block: its last "<think>" comes
// after its last "</think>" and only whitespace follows it.
bool prompt_opens_thinking(std::string_view prompt);
// True when `prompt` ends with a closed block ("</think>" then only whitespace).
bool prompt_closes_thinking(std::string_view prompt);

// Whether the output of `prompt` starts inside the thinking block: qwen3 when
// the prompt opened it; deepseek_r1 unless the prompt closed one; none never.
bool starts_in_reasoning(ReasoningFormat format, std::string_view prompt);

// The format a chat template was written for: one that writes "</think>"
// and DeepSeek's "<｜Assistant｜>" -> deepseek_r1, one that writes
// "<think>" -> qwen3, else none.
ReasoningFormat reasoning_format_for_template(std::string_view template_source);

// "qwen3", "deepseek_r1", "none"; nullopt for anything else ("auto" is the
// caller's: it means reasoning_format_for_template()).
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);
const char* reasoning_format_name(ReasoningFormat format);

// The tags, for the engine's thinking budget and the templates.
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

}  // namespace omnibus::server
