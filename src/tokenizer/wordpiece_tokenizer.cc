#include "tokenizer/wordpiece_tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/wordpiece_tables.h"

namespace omnibus {
namespace {

constexpr std::string_view kPhantomSpace = "\xE2\x96\x81";  // U+2581

unicode::WpClass wp_class(uint32_t cp) {
  using unicode::kWpClassRanges;
  const auto* end = kWpClassRanges + unicode::kNumWpClassRanges;
  const auto* it =
      std::lower_bound(kWpClassRanges, end, cp,
                       [](const unicode::WpClassRange& r, uint32_t c) { return r.last < c; });
  return it != end && it->first <= cp ? it->cls : unicode::WpClass::kOther;
}

uint32_t map_pair(const unicode::CodepointPair* table, size_t n, uint32_t cp) {
  const auto* end = table + n;
  const auto* it = std::lower_bound(
      table, end, cp, [](const unicode::CodepointPair& p, uint32_t c) { return p.from < c; });
  return it != end && it->from == cp ? it->to : cp;
}

// llama.cpp's WPM is_chinese_char (with the HF-compatible 0x2B920 bound).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Phantom-space tokens back to text: "\u2581the" -> " the".
std::string normal_piece(std::string_view text) {
  if (text.substr(0, kPhantomSpace.size()) == kPhantomSpace) {
    std::string out(1, ' ');
    out.append(text.substr(kPhantomSpace.size()));
    return out;
  }
  return std::string(text);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> WordPieceTokenizer::create(VocabIndex vocab) {
  if (vocab.bos_id() < 0 || vocab.eos_id() < 0) {
    return Status::corrupt("bert tokenizer: [CLS] / [SEP] ids are outside the vocabulary");
  }
  if (vocab.unk_id() < 0) return Status::corrupt("bert tokenizer: no unknown token");
  const TokenizerVocab& v = vocab.vocab();
  const bool lowercase = v.normalizer_lowercase.value_or(false);
  const bool strip = v.normalizer_strip_accents.value_or(lowercase);
  auto tok = std::unique_ptr<WordPieceTokenizer>(
      new WordPieceTokenizer(std::move(vocab), lowercase, strip));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

WordPieceTokenizer::WordPieceTokenizer(VocabIndex vocab, bool lowercase, bool strip_accents)
    : Tokenizer(std::move(vocab)), lowercase_(lowercase), strip_accents_(strip_accents) {
  for (int32_t id = 0; id < vocab_.n_vocab(); ++id) {
    max_token_len_ = std::max(max_token_len_, vocab_.text(id).size());
  }
  build_pieces(normal_piece, [](int32_t) { return -1; });
}

std::vector<std::string> WordPieceTokenizer::split_words(std::string_view text) const {
  using unicode::WpClass;
  std::vector<std::string> words(1);
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = unicode::decode_utf8_lenient(text, &pos);
    if (strip_accents_) cp = map_pair(unicode::kNfdFirst, unicode::kNumNfdFirst, cp);
    if (unicode::cp_class(cp) == unicode::CpClass::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const WpClass cls = wp_class(cp);
    if (cp == 0 || cp == unicode::kReplacementChar || cls == WpClass::kControl) continue;
    if (strip_accents_ && cls == WpClass::kMark) continue;
    const uint32_t out =
        lowercase_ ? map_pair(unicode::kLowercase, unicode::kNumLowercase, cp) : cp;
    if (cls == WpClass::kPunctuation || (cp < 0x7F && cls == WpClass::kSymbol) || is_cjk(cp)) {
      if (!words.back().empty()) words.emplace_back();
      unicode::append_utf8(&words.back(), out);
      words.emplace_back();
    } else {
      unicode::append_utf8(&words.back(), out);
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WordPieceTokenizer::encode_fragment(std::string_view text, bool /*after_special*/,
                                         std::vector<int32_t>* out) const {
  for (const std::string& w : split_words(text)) {
    const std::string word = std::string(kPhantomSpace) + w;
    const size_t n = word.size();
    const size_t start = out->size();
    for (size_t i = 0; i < n; ++i) {
      bool match = false;
      for (size_t j = std::min(n, i + max_token_len_ + 1); j > i; --j) {
        if (const auto id = vocab_.find(std::string_view(word).substr(i, j - i))) {
          out->push_back(*id);
          match = true;
          i = j - 1;
          break;
        }
      }
      if (!match) {  // the whole word is unknown
        out->resize(start);
        break;
      }
    }
    if (out->size() == start) out->push_back(vocab_.unk_id());
  }
}

}  // namespace omnibus
