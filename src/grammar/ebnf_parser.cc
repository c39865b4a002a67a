// parse_ebnf(): a recursive-descent parser for GBNF (grammar.h) that builds
// the byte-level Grammar directly. Groups, classes and repetitions become
// generated rules named "<rule>-<n>"; literals become one kBytes element per
// UTF-8 byte. Nesting depth, repetition counts, element totals and text size
// are bounded before anything is allocated, so no input can exhaust memory
// or the stack.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/grammar_analysis.h"
#include "grammar/grammar_automaton.h"
#include "grammar/grammar_matcher.h"
#include "grammar/utf8_ranges.h"
#include "util/check.h"

namespace omnibus::grammar {
namespace {

constexpr int kMaxNesting = 200;  // ( ) groups inside one another

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

using Piece = std::vector<Element>;
using Alternatives = std::vector<std::vector<Element>>;

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits) : src_(text), limits_(limits) {}

  StatusOr<std::shared_ptr<const Grammar>> run();

 private:
  Status error(size_t at, const std::string& what) const;
  void skip_space(bool newline_ok);
  bool at(char c) const { return pos_ < src_.size() && src_[pos_] == c; }
  std::string_view parse_name();
  int32_t rule_for_name(std::string_view name, size_t at);
  int32_t new_rule(std::string name, size_t at);
  Status count_elements(size_t n, size_t at);

  Status parse_rule();
  Status parse_alternatives(bool nested, int depth, Alternatives* out);
  Status parse_sequence(bool nested, int depth, std::vector<Element>* out);
  Status parse_item(bool nested, int depth, Piece* out);
  Status parse_char(bool in_class, uint32_t* cp);
  Status parse_literal(Piece* out);
  Status parse_class(Piece* out);
  Piece class_piece(std::vector<CodeRange> ranges, bool negate, size_t at);
  Status parse_repetition(Piece* piece);
  Status parse_count(int32_t* n);
  Status repeat(Piece* piece, int32_t min, int32_t max, size_t at);

  std::string_view src_;
  GrammarLimits limits_;
  size_t pos_ = 0;
  size_t n_elements_ = 0;
  Grammar g_;
  std::string current_;  // name of the rule being parsed (for generated names)
  std::unordered_map<std::string, int32_t> by_name_;
  std::vector<size_t> rule_pos_;   // where each rule was defined or generated
  std::vector<size_t> first_ref_;  // where each named rule was first referenced
  std::vector<bool> defined_;
  std::map<std::vector<CodeRange>, int32_t> class_rules_;  // shared multi-byte classes
};

Status Parser::error(size_t at, const std::string& what) const {
  int line = 1, col = 1;
  for (size_t i = 0; i < at && i < src_.size(); ++i) {
    if (src_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return Status::invalid_argument("grammar line {}:{}: {}", line, col, what);
}

void Parser::skip_space(bool newline_ok) {
  while (pos_ < src_.size()) {
    const char c = src_[pos_];
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (c == '#') {
      while (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r') ++pos_;
    } else if ((c == '\n' || c == '\r') && newline_ok) {
      ++pos_;
    } else {
      break;
    }
  }
}

std::string_view Parser::parse_name() {
  const size_t start = pos_;
  while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
  return src_.substr(start, pos_ - start);
}

int32_t Parser::new_rule(std::string name, size_t at) {
  g_.rules.push_back(Rule{std::move(name), {}});
  rule_pos_.push_back(at);
  first_ref_.push_back(at);
  defined_.push_back(true);
  return static_cast<int32_t>(g_.rules.size() - 1);
}

int32_t Parser::rule_for_name(std::string_view name, size_t at) {
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  const int32_t r = new_rule(std::string(name), at);
  defined_[r] = false;
  by_name_.emplace(std::string(name), r);
  return r;
}

Status Parser::count_elements(size_t n, size_t at) {
  if (n > limits_.max_elements || n_elements_ + n > limits_.max_elements) {
    return error(at, "grammar too large: more than " + std::to_string(limits_.max_elements) +
                         " elements after expansion");
  }
  n_elements_ += n;
  return Status::ok();
}

StatusOr<std::shared_ptr<const Grammar>> Parser::run() {
  if (src_.size() > limits_.max_text_bytes) {
    return Status::invalid_argument("grammar text is {} bytes, the limit is {}", src_.size(),
                                    limits_.max_text_bytes);
  }
  skip_space(true);
  while (pos_ < src_.size()) {
    OMNIBUS_RETURN_IF_ERROR(parse_rule());
    skip_space(true);
  }
  for (size_t r = 0; r < g_.rules.size(); ++r) {
    if (!defined_[r]) return error(first_ref_[r], "undefined rule '" + g_.rules[r].name + "'");
  }
  auto root = by_name_.find("root");
  if (root == by_name_.end()) return error(src_.size(), "no rule named 'root'");
  g_.root = root->second;
  const std::vector<bool> nullable = nullable_rules(g_);
  const int32_t lr = find_left_recursion(g_, nullable);
  if (lr >= 0) {
    return error(rule_pos_[lr], "rule '" + g_.rules[lr].name + "' is left-recursive");
  }
  const std::vector<bool> productive = productive_rules(g_);
  if (!productive[g_.root]) {
    return Status::invalid_argument(
        "the grammar matches no text: rule 'root' never reaches a literal or class (rules that "
        "only "
        "refer to each other, such as a JSON Schema $ref cycle with nothing else)");
  }
  prune_unproductive(&g_, productive);
  auto g = std::make_shared<Grammar>(std::move(g_));
  g->automaton = std::make_shared<detail::Automaton>(*g);
  // The start state is where every output begins: a grammar whose start
  // exceeds the matcher's bounds could never produce a byte.
  if (GrammarMatcher(g).failed()) {
    return Status::invalid_argument(
        "the grammar is too ambiguous: its start has more than {} alternatives open at once (the "
        "matcher's limit); factor common prefixes out of the alternatives",
        GrammarMatcher::kMaxStacks);
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

Status Parser::parse_rule() {
  const size_t start = pos_;
  const std::string_view name = parse_name();
  if (name.empty()) return error(start, "expected a rule name");
  skip_space(false);
  if (src_.substr(pos_, 3) != "::=") return error(pos_, "expected '::=' after rule name");
  pos_ += 3;
  skip_space(true);
  const int32_t r = rule_for_name(name, start);
  if (defined_[r]) return error(start, "duplicate rule '" + std::string(name) + "'");
  defined_[r] = true;
  rule_pos_[r] = start;
  current_ = std::string(name);
  Alternatives alts;
  OMNIBUS_RETURN_IF_ERROR(parse_alternatives(false, 0, &alts));
  g_.rules[r].alternatives = std::move(alts);
  skip_space(false);
  if (pos_ < src_.size() && src_[pos_] != '\n' && src_[pos_] != '\r') {
    return error(
        pos_, std::string("unexpected '") + src_[pos_] + "': expected an item, '|' or end of line");
  }
  return Status::ok();
}

Status Parser::parse_alternatives(bool nested, int depth, Alternatives* out) {
  while (true) {
    std::vector<Element> seq;
    OMNIBUS_RETURN_IF_ERROR(parse_sequence(nested, depth, &seq));
    out->push_back(std::move(seq));
    if (!at('|')) return Status::ok();
    ++pos_;
    skip_space(true);
  }
}

Status Parser::parse_sequence(bool nested, int depth, std::vector<Element>* out) {
  while (pos_ < src_.size()) {
    const char c = src_[pos_];
    if (!(c == '"' || c == '[' || c == '.' || c == '(' || is_name_char(c))) break;
    Piece piece;
    OMNIBUS_RETURN_IF_ERROR(parse_item(nested, depth, &piece));
    OMNIBUS_RETURN_IF_ERROR(parse_repetition(&piece));
    out->insert(out->end(), piece.begin(), piece.end());
    skip_space(nested);
  }
  return Status::ok();
}

Status Parser::parse_item(bool nested, int depth, Piece* out) {
  const size_t start = pos_;
  const char c = src_[pos_];
  if (c == '"') return parse_literal(out);
  if (c == '[') return parse_class(out);
  if (c == '.') {
    ++pos_;
    *out = class_piece({}, true, start);
    return count_elements(0, start);
  }
  if (c == '(') {
    if (depth >= kMaxNesting) return error(start, "groups nested too deeply");
    ++pos_;
    skip_space(true);
    Alternatives alts;
    OMNIBUS_RETURN_IF_ERROR(parse_alternatives(true, depth + 1, &alts));
    skip_space(true);
    if (!at(')')) return error(pos_, "expected ')'");
    ++pos_;
    if (alts.size() == 1) {  // (a b) is just a b
      *out = std::move(alts[0]);
      return Status::ok();
    }
    const int32_t r = new_rule(current_ + "-" + std::to_string(g_.rules.size()), start);
    g_.rules[r].alternatives = std::move(alts);
    Element e;
    e.kind = Element::Kind::kRule;
    e.rule = r;
    out->push_back(e);
    return count_elements(1, start);
  }
  const std::string_view name = parse_name();
  Element e;
  e.kind = Element::Kind::kRule;
  e.rule = rule_for_name(name, start);
  out->push_back(e);
  return count_elements(1, start);
}

Status Parser::parse_char(bool in_class, uint32_t* cp) {
  const size_t start = pos_;
  if (pos_ >= src_.size()) return error(start, "unexpected end of input");
  if (src_[pos_] != '\\') {
    if (!decode_utf8(src_, &pos_, cp)) return error(start, "invalid UTF-8 in grammar text");
    return Status::ok();
  }
  ++pos_;
  if (pos_ >= src_.size()) return error(start, "unterminated escape");
  const char e = src_[pos_++];
  int digits = 0;
  switch (e) {
    case 'n':
      *cp = '\n';
      return Status::ok();
    case 'r':
      *cp = '\r';
      return Status::ok();
    case 't':
      *cp = '\t';
      return Status::ok();
    case '\\':
    case '"':
    case '\'':
    case ']':
    case '[':
    case '-':
    case '^':
    case '/':
      *cp = static_cast<uint8_t>(e);
      return Status::ok();
    case 'x':
      digits = 2;
      break;
    case 'u':
      digits = 4;
      break;
    case 'U':
      digits = 8;
      break;
    default:
      return error(start, std::string("unknown escape '\\") + e + "'");
  }
  uint64_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const int h = pos_ < src_.size() ? hex_value(src_[pos_]) : -1;
    if (h < 0) return error(pos_, "expected " + std::to_string(digits) + " hex digits in escape");
    v = v * 16 + static_cast<uint64_t>(h);
    ++pos_;
  }
  if (v > kMaxCodePoint) return error(start, "code point beyond U+10FFFF");
  if (v >= 0xD800 && v <= 0xDFFF) return error(start, "surrogate code point in escape");
  *cp = static_cast<uint32_t>(v);
  (void)in_class;
  return Status::ok();
}

Status Parser::parse_literal(Piece* out) {
  const size_t start = pos_;
  ++pos_;  // "
  std::string bytes;
  while (true) {
    if (pos_ >= src_.size()) return error(start, "unterminated literal");
    if (src_[pos_] == '"') break;
    uint32_t cp = 0;
    OMNIBUS_RETURN_IF_ERROR(parse_char(false, &cp));
    append_scalar(cp, &bytes);
    if (bytes.size() > limits_.max_elements) break;  // count_elements reports it
  }
  ++pos_;
  OMNIBUS_RETURN_IF_ERROR(count_elements(bytes.size(), start));
  for (char b : bytes) {
    Element e;
    e.bytes.set(static_cast<uint8_t>(b));
    out->push_back(e);
  }
  return Status::ok();
}

Status Parser::parse_class(Piece* out) {
  const size_t start = pos_;
  ++pos_;  // [
  bool negate = false;
  if (at('^')) {
    negate = true;
    ++pos_;
  }
  std::vector<CodeRange> ranges;
  while (true) {
    if (pos_ >= src_.size()) return error(start, "unterminated character class");
    if (src_[pos_] == ']') break;
    const size_t item = pos_;
    uint32_t lo = 0;
    OMNIBUS_RETURN_IF_ERROR(parse_char(true, &lo));
    uint32_t hi = lo;
    if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
      ++pos_;
      OMNIBUS_RETURN_IF_ERROR(parse_char(true, &hi));
      if (hi < lo) return error(item, "character range out of order");
    }
    ranges.push_back({lo, hi});
  }
  ++pos_;
  *out = class_piece(std::move(ranges), negate, start);
  return count_elements(out->size(), start);
}

Piece Parser::class_piece(std::vector<CodeRange> ranges, bool negate, size_t at) {
  const std::vector<CodeRange> set = normalize_ranges(std::move(ranges), negate);
  Element ascii;
  bool only_ascii = true;
  for (const CodeRange& r : set) {
    if (r.second >= 0x80) {
      only_ascii = false;
      break;
    }
    for (uint32_t c = r.first; c <= r.second; ++c) ascii.bytes.set(c);
  }
  if (only_ascii && !set.empty()) return {ascii};
  Element ref;
  ref.kind = Element::Kind::kRule;
  auto it = class_rules_.find(set);
  if (it != class_rules_.end()) {
    ref.rule = it->second;
    return {ref};
  }
  Alternatives alts;
  Element single;  // every 1-byte sequence merged into one element
  for (const auto& seq : utf8_sequences(set)) {
    if (seq.size() == 1) {
      for (uint32_t b = seq[0].first; b <= seq[0].second; ++b) single.bytes.set(b);
      continue;
    }
    std::vector<Element> elems;
    for (const ByteRange& br : seq) {
      Element e;
      for (uint32_t b = br.first; b <= br.second; ++b) e.bytes.set(b);
      elems.push_back(e);
    }
    alts.push_back(std::move(elems));
  }
  if (single.bytes.any()) alts.insert(alts.begin(), {single});
  const int32_t r = new_rule(current_ + "-" + std::to_string(g_.rules.size()), at);
  n_elements_ += alts.size() * 4;  // bounded: a class has at most ~10 sequences
  g_.rules[r].alternatives = std::move(alts);
  class_rules_.emplace(set, r);
  ref.rule = r;
  return {ref};
}

Status Parser::parse_count(int32_t* n) {
  const size_t start = pos_;
  int64_t v = 0;
  if (pos_ >= src_.size() || src_[pos_] < '0' || src_[pos_] > '9') {
    return error(pos_, "expected a number in repetition");
  }
  while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') {
    v = v * 10 + (src_[pos_] - '0');
    if (v > limits_.max_repeat) {
      return error(start,
                   "repetition count above the limit of " + std::to_string(limits_.max_repeat));
    }
    ++pos_;
  }
  *n = static_cast<int32_t>(v);
  return Status::ok();
}

Status Parser::parse_repetition(Piece* piece) {
  const size_t start = pos_;
  if (at('*')) {
    ++pos_;
    return repeat(piece, 0, -1, start);
  }
  if (at('+')) {
    ++pos_;
    return repeat(piece, 1, -1, start);
  }
  if (at('?')) {
    ++pos_;
    return repeat(piece, 0, 1, start);
  }
  if (!at('{')) return Status::ok();
  ++pos_;
  skip_space(false);
  int32_t min = 0, max = 0;
  OMNIBUS_RETURN_IF_ERROR(parse_count(&min));
  skip_space(false);
  max = min;
  if (at(',')) {
    ++pos_;
    skip_space(false);
    if (at('}')) {
      max = -1;
    } else {
      OMNIBUS_RETURN_IF_ERROR(parse_count(&max));
      skip_space(false);
      if (max < min) return error(start, "repetition {n,m} with m < n");
    }
  }
  if (!at('}')) return error(pos_, "expected '}' to close the repetition");
  ++pos_;
  return repeat(piece, min, max, start);
}

// x{min,max} (max -1: unbounded) = x...x (min copies) followed by
//   unbounded:  r ::= x r | ""                  (right recursion)
//   bounded:    o1 ::= x o2 | "", ..., ok ::= x | ""   (k = max - min, linear)
Status Parser::repeat(Piece* piece, int32_t min, int32_t max, size_t at) {
  const Piece x = std::move(*piece);
  piece->clear();
  const size_t n_opt = max < 0 ? 1 : static_cast<size_t>(max - min);
  OMNIBUS_RETURN_IF_ERROR(
      count_elements(x.size() * (static_cast<size_t>(min) + n_opt) + n_opt, at));
  for (int32_t i = 0; i < min; ++i) piece->insert(piece->end(), x.begin(), x.end());
  if (n_opt == 0) return Status::ok();
  Element ref;
  ref.kind = Element::Kind::kRule;
  if (max < 0) {
    const int32_t r = new_rule(current_ + "-" + std::to_string(g_.rules.size()), at);
    std::vector<Element> loop = x;
    ref.rule = r;
    loop.push_back(ref);
    g_.rules[r].alternatives = {std::move(loop), {}};
    piece->push_back(ref);
    return Status::ok();
  }
  int32_t inner = -1;  // built from the innermost optional outwards
  for (size_t k = 0; k < n_opt; ++k) {
    const int32_t r = new_rule(current_ + "-" + std::to_string(g_.rules.size()), at);
    std::vector<Element> alt = x;
    if (inner >= 0) {
      ref.rule = inner;
      alt.push_back(ref);
    }
    g_.rules[r].alternatives = {std::move(alt), {}};
    inner = r;
  }
  ref.rule = inner;
  piece->push_back(ref);
  return Status::ok();
}

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> parse_ebnf(std::string_view text,
                                                    const GrammarLimits& limits) {
  Parser p(text, limits);
  return p.run();
}

}  // namespace omnibus::grammar
