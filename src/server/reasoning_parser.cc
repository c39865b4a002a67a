#include "server/reasoning_parser.h"

#include <algorithm>

namespace omnibus::server {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

size_t first_non_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

std::string_view rtrim(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return s.substr(0, n);
}

// The length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(ReasoningFormat format, bool in_reasoning)
    : starts_in_reasoning_(in_reasoning) {}

ReasoningDelta ReasoningSplitter::push(std::string_view text) {
  ReasoningDelta out;
  buf_.append(text);
  run(/*final=*/false, out);
  return out;
}

ReasoningDelta ReasoningSplitter::finish() {
  ReasoningDelta out;
  if (finished_) return out;
  run(/*final=*/true, out);
  finished_ = true;
  return out;
}

// One pass over buf_: moves through the states while the text decides them,
// and stops where it must wait for more text (or at the end when final).
void ReasoningSplitter::run(bool final, ReasoningDelta& out) {
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const size_t p = first_non_space(buf_);
        const std::string_view rest = std::string_view(buf_).substr(p);
        if (rest.starts_with(kThinkOpen)) {
          buf_.erase(0, p + kThinkOpen.size());
          state_ = State::kReasoningLead;
          continue;
        }
        const bool undecided = rest.empty() || kThinkOpen.starts_with(rest);
        if (undecided && !final) return;
        state_ = starts_in_reasoning_ ? State::kReasoningLead : State::kContent;
        continue;
      }
      case State::kReasoningLead:
        buf_.erase(0, first_non_space(buf_));
        if (buf_.empty()) return;
        state_ = State::kReasoning;
        continue;
      case State::kReasoning: {
        const size_t close = buf_.find(kThinkClose);
        if (close != std::string::npos) {
          out.reasoning.append(rtrim(std::string_view(buf_).substr(0, close)));
          buf_.erase(0, close + kThinkClose.size());
          state_ = State::kContentLead;
          continue;
        }
        if (final) {
          out.reasoning.append(rtrim(buf_));
          buf_.clear();
          return;
        }
        // Hold back a partial "</think>" and the whitespace before it.
        size_t cut = buf_.size() - partial_tag_suffix(buf_, kThinkClose);
        while (cut > 0 && is_space(buf_[cut - 1])) --cut;
        out.reasoning.append(buf_, 0, cut);
        buf_.erase(0, cut);
        return;
      }
      case State::kContentLead:
        buf_.erase(0, first_non_space(buf_));
        if (buf_.empty()) return;
        state_ = State::kContent;
        continue;
      case State::kContent:
        out.content.append(buf_);
        buf_.clear();
        return;
    }
  }
}

ReasoningDelta split_reasoning(ReasoningFormat format, bool in_reasoning, std::string_view text) {
  if (format == ReasoningFormat::kNone) return ReasoningDelta{"", std::string(text)};
  ReasoningSplitter s(format, in_reasoning);
  ReasoningDelta out = s.push(text);
  ReasoningDelta tail = s.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

bool prompt_opens_thinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkClose);
  if (close != std::string_view::npos && close > open) return false;
  const std::string_view after = prompt.substr(open + kThinkOpen.size());
  return first_non_space(after) == after.size();
}

bool prompt_closes_thinking(std::string_view prompt) {
  size_t n = prompt.size();
  while (n > 0 && is_space(prompt[n - 1])) --n;
  return prompt.substr(0, n).ends_with(kThinkClose);
}

bool starts_in_reasoning(ReasoningFormat format, std::string_view prompt) {
  switch (format) {
    case ReasoningFormat::kQwen3:
      return prompt_opens_thinking(prompt);
    case ReasoningFormat::kDeepSeekR1:
      return !prompt_closes_thinking(prompt);
    case ReasoningFormat::kNone:
      break;
  }
  return false;
}

ReasoningFormat reasoning_format_for_template(std::string_view template_source) {
  const bool closes = template_source.find(kThinkClose) != std::string_view::npos;
  if (closes && template_source.find("\xEF\xBD\x9C"
                                     "Assistant"
                                     "\xEF\xBD\x9C") != std::string_view::npos) {
    return ReasoningFormat::kDeepSeekR1;  // "<｜Assistant｜>"
  }
  if (template_source.find(kThinkOpen) != std::string_view::npos) return ReasoningFormat::kQwen3;
  return ReasoningFormat::kNone;
}

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  if (name == "none") return ReasoningFormat::kNone;
  return std::nullopt;
}

const char* reasoning_format_name(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kQwen3:
      return "qwen3";
    case ReasoningFormat::kDeepSeekR1:
      return "deepseek_r1";
    case ReasoningFormat::kNone:
      break;
  }
  return "none";
}

}  // namespace omnibus::server
