// The reasoning side of one chat choice, between ChoiceOutput's text and the
// tool-call parser: a ReasoningSplitter (reasoning_parser.h) whose content
// goes on to the tool parser and the response, and whose reasoning becomes
// message.reasoning_content / delta.reasoning_content. Also the engine's
// ThinkingRule for a format (the tags as this tokenizer spells them).
//
// Thread-safety: ChoiceReasoning: one choice, one thread. Free functions pure.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/thinking.h"
#include "server/reasoning_parser.h"
#include "tokenizer/tokenizer.h"

namespace omnibus::server {

class ChoiceReasoning {
 public:
  ChoiceReasoning(ReasoningFormat format, bool in_reasoning) : splitter_(format, in_reasoning) {}

  // The choice's next text; `end`: it is the last. After the end: empty.
  ReasoningDelta push(const std::string& text, bool end);
  // The thinking text so far (non-streamed responses).
  const std::string& reasoning() const { return reasoning_; }

 private:
  ReasoningSplitter splitter_;
  std::string reasoning_;
};

// The engine's rule for `format`: "<think>" / "</think>" tokenized (special
// tokens parsed), the block open from the start when in_reasoning
// (starts_in_reasoning of the prompt), and the budget (-1: none). null for kNone or a
// tokenizer that gives a tag no tokens.
std::shared_ptr<const ThinkingRule> thinking_rule(const Tokenizer& tok, ReasoningFormat format,
                                                  bool in_reasoning, int32_t budget);

// The special tokens whose text is a tag, so the choice's text shows them.
std::vector<int32_t> reasoning_tag_tokens(const Tokenizer& tok);

}  // namespace omnibus::server
