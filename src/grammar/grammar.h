// Grammar: the one representation every structured-output format compiles to
// (docs/structured-output.md). JSON Schema (json_schema.h), regular
// expressions (regex.h), choices and the user's EBNF all become EBNF text,
// which parse_ebnf() turns into a Grammar: rules over BYTES, executed by
// GrammarMatcher as a pushdown automaton.
//
// The EBNF is llama.cpp's GBNF, so llama-server grammars work unchanged:
//
//   # comment to end of line
//   root   ::= object                      rule: name ::= alternatives
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   pair   ::= string ":" ws value
//   digit  ::= [0-9]        notdq ::= [^"\\]       any ::= .
//   names:        [a-zA-Z0-9_-]+ ; the start rule is `root`
//   items:        "literal"  [class]  [^class]  .  name  ( alternatives )
//   repetition:   x*  x+  x?  x{n}  x{n,}  x{n,m}   (n, m <= 1000)
//   escapes (in literals and classes): \n \r \t \\ \" \' \] \[ \- \^ \/
//                 \xHH \uHHHH \UHHHHHHHH ; a class range is a-b
//   a rule may continue on the next line while inside ( ) or after | ;
//   otherwise a newline ends it.
// Literals and classes are Unicode code points, encoded as UTF-8; `.` and
// negated classes match any code point outside the set (valid UTF-8 only).
// parse_ebnf rejects, with kInvalidArgument naming the line and column:
// syntax errors, undefined or duplicate rules, a missing root, left recursion
// (direct or indirect, also through nullable prefixes), and sizes beyond
// GrammarLimits; and, naming the cause: a root that derives no text (rules
// that only refer to each other), and a start state beyond the matcher's
// bounds (more than GrammarMatcher::kMaxStacks stacks). Alternatives that can
// never finish (they use a rule that derives no text) are dropped, so every
// prefix a matcher accepts can be completed (grammar_analysis.h). A reference in the LAST position
// of a sequence that loops back to its own rule through nullable elements (`(x?)*` gives r ::= x? r
// | "") is an epsilon loop, not left recursion: it is accepted, as the matcher never pushes a frame
// for a last-position reference. \xHH is the code point U+00HH (as in llama.cpp), not a raw byte.
//
// Thread-safety: a Grammar is immutable after parse_ebnf() and may be shared
// by any number of threads (through shared_ptr<const Grammar>).
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace omnibus::grammar {

struct GrammarLimits {
  size_t max_text_bytes = 1 << 20;  // EBNF source
  size_t max_elements = 1 << 20;    // after expanding repetitions and UTF-8
  int32_t max_repeat = 1000;        // n and m in x{n,m}
};

// One element of a sequence: a set of bytes or a reference to a rule.
struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  int32_t rule = -1;       // kRule: index into Grammar::rules
  std::bitset<256> bytes;  // kBytes: the bytes accepted here
};

// A rule is a list of alternatives, each a sequence of elements (an empty
// sequence matches the empty string).
struct Rule {
  std::string name;  // EBNF name, or a generated one for (groups) and repetitions
  std::vector<std::vector<Element>> alternatives;
};

namespace detail {
class Automaton;  // grammar_automaton.h: flat positions and cached closures
}

struct Grammar {
  std::vector<Rule> rules;
  int32_t root = -1;
  // Filled by parse_ebnf(); a hand-built Grammar leaves it null and each
  // GrammarMatcher compiles its own.
  std::shared_ptr<const detail::Automaton> automaton;
};

// REQUIRES: nothing (any bytes). Never crashes, never takes time or memory
// beyond what `limits` allows.
StatusOr<std::shared_ptr<const Grammar>> parse_ebnf(std::string_view text,
                                                    const GrammarLimits& limits = {});

// Quoting helpers for the compilers that emit EBNF.
// "..." with escapes; valid for any bytes: each byte that is not part of
// valid UTF-8 becomes \uFFFD (a literal is code points, not raw bytes).
std::string ebnf_literal(std::string_view utf8);

}  // namespace omnibus::grammar
