// EBNF text helpers shared by the compilers (regex_parser.cc, json_schema.cc):
// quoting code points into GBNF literals "..." and classes [...], and UTF-8
// decoding of the compilers' inputs. Pure functions; no Grammar involved.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace omnibus::grammar::internal {

// OK when `prefix` may start generated rule names ([a-zA-Z0-9_-]*), else
// kInvalidArgument (JsonSchemaOptions::rule_prefix, regex_to_ebnf).
Status check_rule_prefix(const std::string& prefix);

// Inclusive code-point ranges, sorted and merged by normalize_ranges().
using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Appends `cp` as it must be written inside "..." (in_class=false) or [...]
// (in_class=true): \" \\ (and \] \[ \^ \- in classes), \n \r \t, \xHH for
// other ASCII controls, \uHHHH / \UHHHHHHHH beyond ASCII.
void append_escaped(std::string* out, uint32_t cp, bool in_class);

// "..." for a code-point string (empty: "").
std::string quote_code_points(const std::u32string& cps);

// Decodes UTF-8; nullopt (and *bad_offset) at the first invalid byte.
std::optional<std::u32string> decode_utf8(std::string_view s, size_t* bad_offset,
                                          std::vector<size_t>* byte_offsets = nullptr);

// Sorts and merges; drops the surrogate block D800-DFFF (not valid UTF-8).
void normalize_ranges(CodePointRanges* ranges);
// The complement within [0, 0x10FFFF] minus surrogates. REQUIRES: normalized.
CodePointRanges complement_ranges(const CodePointRanges& ranges);
// `ranges` minus `remove`. REQUIRES: both normalized.
CodePointRanges subtract_ranges(const CodePointRanges& ranges, const CodePointRanges& remove);

// A class item for normalized, non-empty ranges: [a-z0-9], or [^...] when the
// complement is shorter to write.
std::string class_text(const CodePointRanges& ranges);

}  // namespace omnibus::grammar::internal
