// libFuzzer target for the tool-call parsers (server/tool_parsers.h,
// tool_call_syntax.h): for every format, the text fed in two deltas split
// anywhere must give the same content and calls as the whole text at once,
// and every call's arguments must be a JSON object. Any crash, sanitizer
// report, hang or mismatch is a bug. Build and run with scripts/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/tool_parsers.h"

using omnibus::server::ParsedToolCall;
using omnibus::server::StreamingToolParser;
using omnibus::server::ToolParseOutput;
using omnibus::server::ToolParserKind;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // Byte 0: the format; byte 1: where the text is split.
  constexpr ToolParserKind kKinds[] = {ToolParserKind::kHermes, ToolParserKind::kLlama3Json,
                                       ToolParserKind::kMistral, ToolParserKind::kQwen3Coder,
                                       ToolParserKind::kPythonic};
  const ToolParserKind kind = kKinds[data[0] % 5];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const size_t split = text.empty() ? 0 : data[1] % (text.size() + 1);

  const ToolParseOutput whole = omnibus::server::parse_tool_calls(kind, text);
  StreamingToolParser p(kind);
  ToolParseOutput parts = p.push(text.substr(0, split));
  for (ToolParseOutput o : {p.push(text.substr(split)), p.finish()}) {
    parts.content += o.content;
    for (ParsedToolCall& c : o.calls) parts.calls.push_back(std::move(c));
  }
  if (parts.content != whole.content || parts.calls.size() != whole.calls.size()) __builtin_trap();
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    if (parts.calls[i].name != whole.calls[i].name ||
        parts.calls[i].arguments != whole.calls[i].arguments)
      __builtin_trap();
    const auto args =
        nlohmann::json::parse(whole.calls[i].arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object() || whole.calls[i].name.empty()) __builtin_trap();
  }
  return 0;
}
