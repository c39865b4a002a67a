// gguf_quote: render a string from a GGUF file (a key, a tensor name, a
// vocabulary entry, a chat template) for messages and listings. The bytes are
// untrusted: control characters are escaped, and long strings are cut.
//
// Thread-safety: pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace omnibus {

// `s` between `quote` characters; \n \r \t \\ and the quote escaped, other
// bytes < 0x20 and 0x7f as \xNN; bytes >= 0x80 are kept (UTF-8). If s has more
// than max_chars bytes, the first max_chars (backed off to a UTF-8 character
// boundary) are shown followed by `...` after the closing quote and the total,
// e.g. `"{% for message in mes"... (1284 bytes)`.
std::string gguf_quote(std::string_view s, size_t max_chars = 120, char quote = '"');
// The same without quotes (nothing extra escaped): for table cells.
std::string gguf_escape(std::string_view s, size_t max_chars = 120);

}  // namespace omnibus
