#include "server/reasoning_output.h"

namespace omnibus::server {

ReasoningDelta ChoiceReasoning::push(const std::string& text, bool end) {
  ReasoningDelta d;
  if (splitter_.finished()) return d;
  d = splitter_.push(text);
  if (end) {
    ReasoningDelta rest = splitter_.finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
  }
  reasoning_ += d.reasoning;
  return d;
}

std::shared_ptr<const ThinkingRule> thinking_rule(const Tokenizer& tok, ReasoningFormat format,
                                                  bool in_reasoning, int32_t budget) {
  if (format == ReasoningFormat::kNone) return nullptr;
  auto rule = std::make_shared<ThinkingRule>();
  rule->open = tok.encode(kThinkOpen, /*add_special=*/false, /*parse_special=*/true);
  rule->close = tok.encode(kThinkClose, /*add_special=*/false, /*parse_special=*/true);
  rule->starts_open = in_reasoning;
  rule->budget = budget;
  if (rule->open.empty() || rule->close.empty()) return nullptr;
  return rule;
}

std::vector<int32_t> reasoning_tag_tokens(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (std::string_view tag : {kThinkOpen, kThinkClose}) {
    std::optional<int32_t> id = tok.token_id(tag);
    if (id && tok.is_special(*id)) ids.push_back(*id);
  }
  return ids;
}

}  // namespace omnibus::server
