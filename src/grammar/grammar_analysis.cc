#include "grammar/grammar_analysis.h"

#include <algorithm>

namespace omnibus::grammar {

namespace {

// The least set of rules with an alternative that `counts` and whose every
// rule reference is in the set (a worklist fixpoint). users[r] lists an
// alternative once per reference to r; pending counts its references not yet
// in the set.
template <typename Counts>
std::vector<bool> rules_closed_under(const Grammar& g, Counts counts) {
  const size_t n = g.rules.size();
  std::vector<bool> in(n, false);
  std::vector<int32_t> alt_rule;
  std::vector<int32_t> pending;
  std::vector<std::vector<int32_t>> users(n);
  std::vector<int32_t> work;
  for (size_t r = 0; r < n; ++r) {
    for (const auto& alt : g.rules[r].alternatives) {
      if (!counts(alt)) continue;
      const int32_t id = static_cast<int32_t>(alt_rule.size());
      alt_rule.push_back(static_cast<int32_t>(r));
      int32_t refs = 0;
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::kRule) {
          users[e.rule].push_back(id);
          ++refs;
        }
      }
      pending.push_back(refs);
      if (refs == 0 && !in[r]) {
        in[r] = true;
        work.push_back(static_cast<int32_t>(r));
      }
    }
  }
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    for (int32_t id : users[r]) {
      if (--pending[id] == 0 && !in[alt_rule[id]]) {
        in[alt_rule[id]] = true;
        work.push_back(alt_rule[id]);
      }
    }
  }
  return in;
}

}  // namespace

// Nullable: an alternative of rule references only, each nullable.
std::vector<bool> nullable_rules(const Grammar& g) {
  return rules_closed_under(g, [](const auto& alt) {
    return std::none_of(alt.begin(), alt.end(),
                        [](const Element& e) { return e.kind == Element::Kind::kBytes; });
  });
}

namespace {

struct Edge {
  int32_t to;
  bool growing;  // not the last element: the matcher pushes a frame
};

}  // namespace

int32_t find_left_recursion(const Grammar& g, const std::vector<bool>& nullable) {
  const int32_t n = static_cast<int32_t>(g.rules.size());
  std::vector<std::vector<Edge>> edges(n);
  for (int32_t r = 0; r < n; ++r) {
    for (const auto& alt : g.rules[r].alternatives) {
      for (size_t i = 0; i < alt.size(); ++i) {
        if (alt[i].kind == Element::Kind::kBytes) break;
        edges[r].push_back({alt[i].rule, i + 1 < alt.size()});
        if (!nullable[alt[i].rule]) break;
      }
    }
  }
  // Tarjan's strongly connected components, iteratively.
  std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<bool> on_stack(n, false);
  std::vector<int32_t> stack;
  std::vector<std::pair<int32_t, size_t>> call;  // (node, next edge)
  int32_t counter = 0, n_comp = 0;
  for (int32_t s = 0; s < n; ++s) {
    if (index[s] != -1) continue;
    call.push_back({s, 0});
    index[s] = low[s] = counter++;
    stack.push_back(s);
    on_stack[s] = true;
    while (!call.empty()) {
      auto& [v, e] = call.back();
      if (e < edges[v].size()) {
        const int32_t w = edges[v][e++].to;
        if (index[w] == -1) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const int32_t done = v;
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
      if (low[done] == index[done]) {
        int32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          comp[w] = n_comp;
        } while (w != done);
        ++n_comp;
      }
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (e.growing && comp[e.to] == comp[r]) return r;
    }
  }
  return -1;
}

// Productive (derives some text): an alternative whose byte sets are all
// non-empty and whose rule references are all productive.
std::vector<bool> productive_rules(const Grammar& g) {
  return rules_closed_under(g, [](const auto& alt) {
    return std::none_of(alt.begin(), alt.end(), [](const Element& e) {
      return e.kind == Element::Kind::kBytes && e.bytes.none();
    });
  });
}

void prune_unproductive(Grammar* g, const std::vector<bool>& productive) {
  auto dead = [&](const std::vector<Element>& alt) {
    return std::any_of(alt.begin(), alt.end(), [&](const Element& e) {
      return e.kind == Element::Kind::kBytes ? e.bytes.none() : !productive[e.rule];
    });
  };
  for (Rule& rule : g->rules) {
    auto& alts = rule.alternatives;
    alts.erase(std::remove_if(alts.begin(), alts.end(), dead), alts.end());
  }
}

}  // namespace omnibus::grammar
