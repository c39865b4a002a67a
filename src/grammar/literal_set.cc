#include "grammar/literal_set.h"

#include <algorithm>
#include <deque>

#include "grammar/ebnf_text.h"
#include "grammar/utf8_ranges.h"
#include "util/check.h"

namespace omnibus::grammar {
namespace {

// UTF-8 -> code points; an invalid byte is U+FFFD (as ebnf_literal does).
std::u32string code_points(const std::string& s) {
  std::u32string out;
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp = 0;
    if (!decode_utf8(s, &pos, &cp)) {
      cp = 0xFFFD;
      ++pos;
    }
    out.push_back(static_cast<char32_t>(cp));
  }
  return out;
}

// A rule still to write: the sorted, distinct strings [lo, hi), which share
// their first `depth` code points. Each group of them with the same next code
// point becomes `"common part" helper`, or just a literal for a group of one.
struct Range {
  size_t lo, hi, depth;
};

}  // namespace

LiteralSetEbnf literal_set_ebnf(const std::vector<std::string>& literals,
                                const std::function<std::string(size_t)>& rule_name) {
  OMNIBUS_CHECK(!literals.empty());
  std::vector<std::u32string> s;
  s.reserve(literals.size());
  for (const std::string& l : literals) s.push_back(code_points(l));
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());

  LiteralSetEbnf out;
  // Breadth first: a helper's number is its place in the queue, so names are
  // asked for in order and every body can name its helpers at once.
  std::deque<Range> queue = {{0, s.size(), 0}};
  size_t n_helpers = 0;
  for (bool first = true; !queue.empty(); first = false) {
    const Range r = queue.front();
    queue.pop_front();
    std::string body;
    auto alternative = [&body](const std::string& text) {
      if (!body.empty()) body += " | ";
      body += text;
    };
    size_t i = r.lo;
    if (s[i].size() == r.depth) {  // sorted: the string that ends here comes first
      alternative("\"\"");
      ++i;
    }
    while (i < r.hi) {
      const char32_t c = s[i][r.depth];
      size_t j = i + 1;
      while (j < r.hi && s[j][r.depth] == c) ++j;
      if (j == i + 1) {
        alternative(internal::quote_code_points(s[i].substr(r.depth)));
      } else {
        // Sorted: the group's common prefix is that of its first and last.
        const std::u32string& a = s[i];
        const std::u32string& b = s[j - 1];
        size_t end = r.depth + 1;
        while (end < a.size() && end < b.size() && a[end] == b[end]) ++end;
        const std::string name = rule_name(n_helpers++);
        alternative(internal::quote_code_points(a.substr(r.depth, end - r.depth)) + " " + name);
        queue.push_back({i, j, end});
      }
      i = j;
    }
    if (first) {
      out.body = std::move(body);
    } else {
      out.rules.push_back(std::move(body));
    }
  }
  OMNIBUS_CHECK(out.rules.size() == n_helpers);
  return out;
}

}  // namespace omnibus::grammar
