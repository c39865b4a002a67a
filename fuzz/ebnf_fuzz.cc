// libFuzzer target for the EBNF parser and the matcher: parse arbitrary bytes
// as GBNF; when they parse, feed the input's first bytes to a matcher, byte
// by byte and then all at once, and touch every query. Any crash, sanitizer
// report, hang or runaway allocation is a bug: bad grammars must come back as
// a Status, and the matcher must stay within kMaxStacks. Build and run with
// scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"

namespace {
volatile uint64_t g_sink;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  omnibus::grammar::GrammarLimits limits;
  limits.max_elements = 1 << 16;  // keep each input fast; the limit path is exercised too
  auto g = omnibus::grammar::parse_ebnf(text, limits);
  if (!g.is_ok()) {
    if (g.status().message().empty()) __builtin_trap();  // every error explains itself
    return 0;
  }
  omnibus::grammar::GrammarMatcher m(*g);
  const std::string initial = m.state_key();
  uint64_t h = initial.size() + m.can_end() + m.is_complete();
  const std::string_view feed = text.substr(0, 32);
  size_t k = 0;  // bytes of feed accepted before the first rejection
  for (; k < feed.size(); ++k) {
    const uint8_t c = static_cast<uint8_t>(feed[k]);
    const bool offered = m.next_bytes()[c];
    if (!m.accept_byte(c)) break;
    if (!offered) __builtin_trap();  // next_bytes() covers every accepted byte
    h += m.can_end() + m.is_complete();
  }
  // accept_bytes agrees with byte-by-byte feeding and is all-or-nothing
  omnibus::grammar::GrammarMatcher all(*g);
  if (!all.accept_bytes(feed.substr(0, k)) && k > 0 && !m.failed()) __builtin_trap();
  if (!m.failed() && all.state_key() != m.state_key()) __builtin_trap();
  if (k < feed.size()) {
    omnibus::grammar::GrammarMatcher none(*g);
    if (none.accept_bytes(feed.substr(0, k + 1))) __builtin_trap();
    if (none.state_key() != initial) __builtin_trap();
  }
  g_sink = h;
  return 0;
}
