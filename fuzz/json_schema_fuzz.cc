// libFuzzer target for the JSON Schema compiler: arbitrary bytes as a schema,
// with and without a rule prefix, strict, compact, and tight limits. Any
// crash, sanitizer report or hang is a bug: bad schemas must come back as
// kInvalidArgument. What compiles is fed to parse_ebnf, which must not crash
// either (it may refuse: e.g. a $ref cycle with no text in between is left
// recursive). Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  omnibus::grammar::JsonSchemaOptions options;
  options.rule_prefix = size % 2 ? "t-" : "";
  options.strict = size % 3 == 0;
  options.any_whitespace = size % 5 != 0;
  options.max_depth = 16;
  options.max_output_bytes = 1 << 18;
  auto ebnf = omnibus::grammar::json_schema_to_ebnf(text, options);
  if (ebnf.is_ok()) {
    if (ebnf->size() > options.max_output_bytes + (1 << 16)) __builtin_trap();  // the limit holds
    std::string full = *ebnf;
    if (!options.rule_prefix.empty()) full += "root ::= t-root\n";
    (void)omnibus::grammar::parse_ebnf(full);
  } else if (ebnf.status().code() != omnibus::StatusCode::kInvalidArgument) {
    __builtin_trap();
  }
  return 0;
}
