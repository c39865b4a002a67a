#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <cstring>

#include "grammar/grammar_automaton.h"
#include "util/check.h"

namespace omnibus::grammar {
namespace {

using detail::Automaton;
using detail::Closure;

constexpr size_t kMaxStateInts = 1 << 24;  // all stacks of one state together

// Per-thread scratch so advancing allocates nothing once warm: buffers are
// swapped with the matcher's state, so capacity circulates.
struct Scratch {
  std::vector<int32_t> raw;
  std::vector<int32_t> sorted;
  std::vector<std::pair<uint32_t, uint32_t>> spans;  // (offset of len, len)
};
thread_local Scratch t_scratch;

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  OMNIBUS_CHECK(grammar_ != nullptr);
  if (grammar_->automaton != nullptr) {
    automaton_ = grammar_->automaton.get();
  } else {
    owned_automaton_ = std::make_shared<detail::Automaton>(*grammar_);
    automaton_ = owned_automaton_.get();
  }
  std::vector<int32_t> raw;
  bool overflow = false;
  expand(nullptr, 0, automaton_->start(), &raw, &overflow);
  if (overflow || !set_state(&raw)) {
    failed_ = true;
    state_.clear();
  }
}

void GrammarMatcher::expand(const int32_t* base, int32_t base_len, int32_t q,
                            std::vector<int32_t>* out, bool* overflow) const {
  const Automaton& a = *automaton_;
  while (true) {
    if (a.kind(q) == Automaton::kBytes) {  // the common case: no closure needed
      out->push_back(base_len + 1);
      out->insert(out->end(), base, base + base_len);
      out->push_back(q);
      return;
    }
    const Closure& c = a.closure(q);
    if (c.overflow) *overflow = true;
    const int32_t* s = c.stacks.data();
    const int32_t* end = s + c.stacks.size();
    while (s < end) {
      const int32_t len = *s++;
      out->push_back(base_len + len);
      out->insert(out->end(), base, base + base_len);
      out->insert(out->end(), s, s + len);
      s += len;
    }
    if (out->size() > kMaxStateInts) *overflow = true;
    if (!c.pop || *overflow) return;
    if (base_len == 0) {
      out->push_back(0);  // the root may end here
      return;
    }
    q = base[base_len - 1];
    --base_len;
  }
}

bool GrammarMatcher::set_state(std::vector<int32_t>* raw) {
  auto& spans = t_scratch.spans;
  spans.clear();
  for (size_t i = 0; i < raw->size(); i += 1 + (*raw)[i]) {
    spans.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>((*raw)[i])});
  }
  key_valid_ = false;
  if (spans.size() == 1) {
    state_.swap(*raw);
    return true;
  }
  const int32_t* d = raw->data();
  auto less = [d](const std::pair<uint32_t, uint32_t>& x, const std::pair<uint32_t, uint32_t>& y) {
    if (x.second != y.second) return x.second < y.second;
    return std::memcmp(d + x.first + 1, d + y.first + 1, x.second * sizeof(int32_t)) < 0;
  };
  auto equal = [d](const std::pair<uint32_t, uint32_t>& x, const std::pair<uint32_t, uint32_t>& y) {
    return x.second == y.second &&
           std::memcmp(d + x.first + 1, d + y.first + 1, x.second * sizeof(int32_t)) == 0;
  };
  std::sort(spans.begin(), spans.end(), less);
  spans.erase(std::unique(spans.begin(), spans.end(), equal), spans.end());
  if (spans.size() > kMaxStacks) return false;
  auto& sorted = t_scratch.sorted;
  sorted.clear();
  for (const auto& sp : spans)
    sorted.insert(sorted.end(), d + sp.first, d + sp.first + 1 + sp.second);
  state_.swap(sorted);
  return true;
}

bool GrammarMatcher::accept_byte(uint8_t b) {
  if (failed_) return false;
  const Automaton& a = *automaton_;
  auto& raw = t_scratch.raw;
  raw.clear();
  bool overflow = false;
  const int32_t* d = state_.data();
  for (size_t i = 0; i < state_.size(); i += 1 + d[i]) {
    const int32_t len = d[i];
    if (len == 0) continue;
    const int32_t top = d[i + len];
    if (!a.accepts(top, b)) continue;
    expand(d + i + 1, len - 1, top + 1, &raw, &overflow);
    if (overflow) break;
  }
  if (!overflow && raw.empty()) return false;
  if (overflow || !set_state(&raw)) {
    failed_ = true;
    state_.clear();
    key_valid_ = false;
    return false;
  }
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (bytes.empty()) return !failed_;
  GrammarMatcher copy = *this;
  for (char c : bytes) {
    if (!copy.accept_byte(static_cast<uint8_t>(c))) return false;
  }
  *this = std::move(copy);
  return true;
}

bool GrammarMatcher::can_end() const {
  const int32_t* d = state_.data();
  for (size_t i = 0; i < state_.size(); i += 1 + d[i]) {
    if (d[i] == 0) return true;
  }
  return false;
}

bool GrammarMatcher::is_complete() const {
  return !failed_ && state_.size() == 1 && state_[0] == 0;
}

bool GrammarMatcher::failed() const { return failed_; }

std::bitset<256> GrammarMatcher::next_bytes() const {
  std::bitset<256> out;
  const int32_t* d = state_.data();
  for (size_t i = 0; i < state_.size(); i += 1 + d[i]) {
    if (d[i] > 0) out |= automaton_->bytes(d[i + d[i]]);
  }
  return out;
}

const std::string& GrammarMatcher::state_key() const {
  if (!key_valid_) {
    key_.assign(reinterpret_cast<const char*>(state_.data()), state_.size() * sizeof(int32_t));
    if (failed_) key_ = "failed";  // not a multiple of 4 bytes: never a real state
    key_valid_ = true;
  }
  return key_;
}

const std::shared_ptr<const Grammar>& GrammarMatcher::grammar() const { return grammar_; }

void GrammarMatcher::copy_state_from(const GrammarMatcher& o) {
  OMNIBUS_DCHECK(automaton_ == o.automaton_);
  state_.assign(o.state_.begin(), o.state_.end());
  failed_ = o.failed_;
  key_valid_ = false;
}

}  // namespace omnibus::grammar
