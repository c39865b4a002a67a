// libFuzzer target for the reasoning parser (server/reasoning_parser.h): the
// first byte picks the format and in_reasoning, the second a chunk size; the
// rest is model output. Streaming it in chunks must give exactly the split of
// the whole text, reasoning never after content, and the parts must be
// pieces of the input (no byte invented). Any crash or mismatch is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/reasoning_parser.h"

using omnibus::server::ReasoningDelta;
using omnibus::server::ReasoningFormat;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ReasoningFormat format =
      (data[0] & 1) ? ReasoningFormat::kDeepSeekR1 : ReasoningFormat::kQwen3;
  const bool in_reasoning = (data[0] & 2) != 0;
  const size_t chunk = 1 + data[1] % 16;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  const ReasoningDelta whole = omnibus::server::split_reasoning(format, in_reasoning, text);
  omnibus::server::ReasoningSplitter s(format, in_reasoning);
  std::string reasoning, content;
  for (size_t i = 0; i < text.size(); i += chunk) {
    const ReasoningDelta d = s.push(text.substr(i, chunk));
    if (!d.reasoning.empty() && !content.empty()) __builtin_trap();
    reasoning += d.reasoning;
    content += d.content;
  }
  const ReasoningDelta d = s.finish();
  if (!d.reasoning.empty() && !content.empty()) __builtin_trap();
  reasoning += d.reasoning;
  content += d.content;
  if (reasoning != whole.reasoning || content != whole.content) __builtin_trap();
  if (reasoning.size() + content.size() > text.size()) __builtin_trap();
  if (!content.empty() && text.find(content) == std::string_view::npos) __builtin_trap();
  if (!reasoning.empty() && text.find(reasoning) == std::string_view::npos) __builtin_trap();
  return 0;
}
