#include "grammar/grammar_automaton.h"

#include <set>
#include <unordered_map>

#include "grammar/grammar_matcher.h"
#include "util/check.h"

namespace omnibus::grammar::detail {
namespace {

constexpr size_t kMaxSeen = 1 << 14;       // configurations explored by one closure
constexpr size_t kMaxDepth = 1 << 14;      // positions in one relative stack
constexpr size_t kMaxStackInts = 1 << 20;  // ints in one closure's stacks (and in `seen`)

}  // namespace

Automaton::Automaton(const Grammar& g) {
  const size_t n_rules = g.rules.size();
  OMNIBUS_CHECK(g.root >= 0 && static_cast<size_t>(g.root) < n_rules);
  std::unordered_map<std::bitset<256>, int32_t> set_ids;
  auto set_id = [&](const std::bitset<256>& s) {
    auto [it, inserted] = set_ids.emplace(s, static_cast<int32_t>(byte_sets_.size()));
    if (inserted) byte_sets_.push_back(s);
    return it->second;
  };
  alt_starts_.resize(n_rules + 1);
  auto add_alt = [&](size_t r, const std::vector<Element>& alt) {
    alt_starts_[r].push_back(static_cast<int32_t>(kind_.size()));
    for (const Element& e : alt) {
      if (e.kind == Element::Kind::kBytes) {
        kind_.push_back(kBytes);
        arg_.push_back(set_id(e.bytes));
      } else {
        OMNIBUS_CHECK(e.rule >= 0 && static_cast<size_t>(e.rule) < n_rules);
        kind_.push_back(kRef);
        arg_.push_back(e.rule);
      }
    }
    kind_.push_back(kEnd);
    arg_.push_back(-1);
  };
  for (size_t r = 0; r < n_rules; ++r) {
    for (const auto& alt : g.rules[r].alternatives) add_alt(r, alt);
  }
  Element root;  // the start: a sequence holding only a reference to root
  root.kind = Element::Kind::kRule;
  root.rule = g.root;
  add_alt(n_rules, {root});
  start_ = alt_starts_[n_rules][0];
  cache_ = std::make_unique<std::atomic<const Closure*>[]>(kind_.size());
  for (size_t i = 0; i < kind_.size(); ++i) cache_[i].store(nullptr, std::memory_order_relaxed);
}

const Closure& Automaton::closure(int32_t pos) const {
  const Closure* c = cache_[pos].load(std::memory_order_acquire);
  if (c != nullptr) return *c;
  std::lock_guard<std::mutex> lock(mu_);
  c = cache_[pos].load(std::memory_order_relaxed);
  if (c == nullptr) {
    c = compute(pos);
    cache_[pos].store(c, std::memory_order_release);
  }
  return *c;
}

// REQUIRES: mu_ held.
const Closure* Automaton::compute(int32_t pos) const {
  auto out = std::make_unique<Closure>();
  std::set<std::vector<int32_t>> seen;
  std::vector<std::vector<int32_t>> work = {{pos}};
  size_t n_stacks = 0;
  size_t seen_ints = 0;  // memory held by `seen`
  while (!work.empty()) {
    std::vector<int32_t> rs = std::move(work.back());
    work.pop_back();
    if (rs.size() > kMaxDepth || seen.size() > kMaxSeen || seen_ints > kMaxStackInts ||
        out->stacks.size() > kMaxStackInts || n_stacks > GrammarMatcher::kMaxStacks) {
      out->overflow = true;
      break;
    }
    if (!seen.insert(rs).second) continue;
    seen_ints += rs.size();
    if (rs.empty()) {
      out->pop = true;
      continue;
    }
    const int32_t t = rs.back();
    switch (kind(t)) {
      case kBytes:
        ++n_stacks;
        out->stacks.push_back(static_cast<int32_t>(rs.size()));
        out->stacks.insert(out->stacks.end(), rs.begin(), rs.end());
        break;
      case kEnd:
        rs.pop_back();
        work.push_back(std::move(rs));
        break;
      case kRef: {
        if (kind(t + 1) == kEnd) {
          rs.pop_back();  // last position: no frame to come back to
        } else {
          rs.back() = t + 1;
        }
        for (int32_t s : alt_starts_[arg_[t]]) {
          std::vector<int32_t> next = rs;
          next.push_back(s);
          work.push_back(std::move(next));
        }
        break;
      }
    }
  }
  if (n_stacks > GrammarMatcher::kMaxStacks) out->overflow = true;
  owned_.push_back(std::move(out));
  return owned_.back().get();
}

}  // namespace omnibus::grammar::detail
