// Unicode data for the WordPiece (BERT) pre-processing (wordpiece_tokenizer.h),
// generated into wordpiece_tables.cc by gen_wordpiece_tables.py: the general
// categories llama.cpp's WPM tokenizer tests (punctuation, symbol, control,
// marks), simple lowercase mappings and the first codepoint of each NFD
// decomposition. All tables are sorted by codepoint.
//
// Thread-safety: constant data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace omnibus::unicode {

enum class WpClass : uint8_t { kOther = 0, kPunctuation, kSymbol, kControl, kMark };

struct WpClassRange {
  uint32_t first;  // inclusive
  uint32_t last;   // inclusive
  WpClass cls;
};

struct CodepointPair {
  uint32_t from;
  uint32_t to;
};

extern const WpClassRange kWpClassRanges[];
extern const size_t kNumWpClassRanges;
extern const CodepointPair kLowercase[];
extern const size_t kNumLowercase;
extern const CodepointPair kNfdFirst[];
extern const size_t kNumNfdFirst;

}  // namespace omnibus::unicode
