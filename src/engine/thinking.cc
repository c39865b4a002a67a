#include "engine/thinking.h"

#include <algorithm>

namespace omnibus {

ThinkingTracker::ThinkingTracker(const ThinkingRule* rule) : rule_(rule) {
  if (rule_ != nullptr) tail_.reserve(rule_->close.size() + 1);  // no allocation on the step path
  if (rule_ == nullptr || rule_->close.empty()) {
    phase_ = Phase::kAnswer;
  } else if (rule_->starts_open) {
    phase_ = Phase::kOpen;
  } else {
    phase_ = rule_->open.empty() ? Phase::kAnswer : Phase::kUndecided;
  }
}

std::optional<int32_t> ThinkingTracker::forced_token() const {
  if (phase_ != Phase::kOpen || rule_->budget < 0 || n_inside_ < rule_->budget) return std::nullopt;
  return rule_->close[size_t(n_forced_)];
}

std::optional<int32_t> ThinkingTracker::may_open() const {
  if (phase_ != Phase::kUndecided) return std::nullopt;
  return rule_->open[size_t(n_seen_)];
}

bool ThinkingTracker::on_token(int32_t token) {
  just_closed_ = false;
  const int32_t pos = n_seen_++;
  switch (phase_) {
    case Phase::kAnswer:
      return true;
    case Phase::kUndecided:
      if (token != rule_->open[size_t(pos)]) {
        phase_ = Phase::kAnswer;  // no block (a partly matched tag is answer text)
        n_reasoning_ = 0;
        return true;
      }
      n_reasoning_ = pos + 1;
      if (size_t(n_reasoning_) == rule_->open.size()) phase_ = Phase::kOpen;
      return false;
    case Phase::kOpen:
      break;
  }
  const bool forced = forced_token().has_value();
  if (forced) {
    ++n_forced_;
  } else {
    ++n_inside_;
  }
  ++n_reasoning_;
  const std::vector<int32_t>& close = rule_->close;
  tail_.push_back(token);
  if (tail_.size() > close.size()) tail_.erase(tail_.begin());
  if (tail_ == close || size_t(n_forced_) == close.size()) {
    phase_ = Phase::kAnswer;
    just_closed_ = true;
  }
  return false;
}

}  // namespace omnibus
