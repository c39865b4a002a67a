#include "server/stop_matcher.h"

#include <algorithm>

#include "util/check.h"

namespace omnibus::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) OMNIBUS_CHECK(!s.empty());
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return "";
  pending_.append(text);
  if (stops_.empty()) {
    std::string out = std::move(pending_);
    pending_.clear();
    n_emitted_ += out.size();
    return out;
  }
  // The earliest complete stop string ends the text.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    std::string out = pending_.substr(0, first);
    pending_.clear();
    stopped_ = true;
    n_emitted_ += out.size();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  n_emitted_ += out.size();
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return "";
  std::string out = std::move(pending_);
  pending_.clear();
  n_emitted_ += out.size();
  return out;
}

}  // namespace omnibus::server
