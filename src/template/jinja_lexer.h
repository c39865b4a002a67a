// Jinja lexer: template text -> tokens (text runs, tag delimiters and the
// expression tokens inside tags), with Jinja2's whitespace rules applied the
// way Hugging Face's apply_chat_template configures them:
//   - line endings are normalised to "\n" and one trailing newline is dropped
//     (keep_trailing_newline=False);
//   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}`
//     / `-#}` all whitespace after it;
//   - trim_blocks=True: the first "\n" after a block tag or comment is removed;
//   - lstrip_blocks=True: spaces and tabs between the start of a line and a
//     block tag or comment are removed (`{%+` turns this off for one tag).
// Comments produce no tokens.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace omnibus::jinja {

enum class TokenKind {
  kText,        // literal template text (text holds it)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal, escapes decoded (text holds the value)
  kInt,         // integer literal (text holds the digits, '_' removed)
  kFloat,       // float literal
  kOp,          // operator or punctuation: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < <= > >=
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  size_t pos = 0;  // byte offset in the normalised source
};

// The normalised source (see above) and its tokens; positions refer to it.
struct LexResult {
  std::string source;
  std::vector<Token> tokens;  // ends with kEof
};

// kInvalidArgument with "line L, column C" for an unterminated tag, comment
// or string, or a character that starts no token.
StatusOr<LexResult> lex(std::string_view source);

// "line 3, column 14" for a byte offset of `source`.
std::string describe_position(std::string_view source, size_t pos);

}  // namespace omnibus::jinja
