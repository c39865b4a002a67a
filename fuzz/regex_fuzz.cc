// libFuzzer target for the regex compiler: arbitrary bytes as a pattern, in
// plain and JSON-string mode. Any crash, sanitizer report or hang is a bug;
// errors must be kInvalidArgument. A compiled short pattern must also be
// valid EBNF: parse_ebnf accepting it checks the quoting and escaping.
// Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "grammar/regex_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view pattern(reinterpret_cast<const char*>(data), size);
  auto ebnf = omnibus::grammar::regex_to_ebnf(pattern);
  if (ebnf.is_ok()) {
    auto g = omnibus::grammar::parse_ebnf(*ebnf);
    // Short patterns stay far below the parser's size limits, so a refusal is
    // a quoting bug in the compiler.
    if (!g.is_ok() && size <= 64) __builtin_trap();
  } else if (ebnf.status().code() != omnibus::StatusCode::kInvalidArgument) {
    __builtin_trap();
  }
  omnibus::grammar::internal::RegexOptions json;
  json.json_string_content = true;
  auto item = omnibus::grammar::internal::regex_item(pattern, json);
  if (item.is_ok()) {
    auto g = omnibus::grammar::parse_ebnf("root ::= \"\\\"\" " + *item + " \"\\\"\"\n");
    if (!g.is_ok() && size <= 64) __builtin_trap();
  }
  return 0;
}
