#include "tokenizer/special_split.h"

namespace omnibus {
namespace {

// C's isspace in the "C" locale, as llama.cpp strips around special tokens.
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

std::vector<TextFragment> split_special_tokens(const VocabIndex& vocab, std::string_view text,
                                               bool parse_special) {
  std::vector<TextFragment> frags;
  if (text.empty()) return frags;
  frags.push_back(TextFragment{-1, 0, text.size()});
  std::vector<TextFragment> next;
  for (const int32_t id : vocab.special_tokens_by_length()) {
    if (!parse_special && (vocab.attr(id) & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = vocab.text(id);
    const uint32_t attr = vocab.attr(id);
    bool found = false;
    next.clear();
    for (const TextFragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      const size_t end = f.begin + f.length;
      while (pos < end) {
        const size_t hit = text.substr(0, end).find(needle, pos);
        if (hit == std::string_view::npos) break;
        found = true;
        if (hit > pos) next.push_back(TextFragment{-1, pos, hit - pos});
        next.push_back(TextFragment{id, hit, needle.size()});
        pos = hit + needle.size();
        if (attr & kAttrRstrip) {
          while (pos < end && is_space(text[pos])) ++pos;
        }
      }
      if (pos < end) next.push_back(TextFragment{-1, pos, end - pos});
    }
    if (found) frags.swap(next);
  }
  return frags;
}

}  // namespace omnibus
