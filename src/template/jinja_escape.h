// Single-character escape tables. Jinja rewrites single characters in three
// places: string-literal escapes in the lexer (\n stands for a newline),
// json.dumps ('"' is written as \"), and the `escape` filter ('<' as &lt;).
// Each keeps its own table of CharEscape entries and looks characters up here.
//
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string_view>

namespace omnibus::jinja {

// `from` is written as `to`.
struct CharEscape {
  char from;
  std::string_view to;
};

// The entry for c in `table`, or nullptr when c has none.
inline const CharEscape* find_escape(std::span<const CharEscape> table, char c) {
  for (const CharEscape& e : table) {
    if (e.from == c) return &e;
  }
  return nullptr;
}

}  // namespace omnibus::jinja
