#include "tokenizer/spm_tokenizer.h"

#include <fmt/format.h>

#include <queue>

#include "util/check.h"

namespace omnibus {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// Bytes of one UTF-8 character judged by its lead byte alone (continuation
// and invalid bytes count as one), as llama.cpp's unicode_len_utf8.
size_t utf8_len_from_lead(char c) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(c) >> 4];
}

// ' ' -> "▁" everywhere.
std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMarker;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// "▁" -> ' ' everywhere.
std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out.push_back(' ');
      pos += kSpaceMarker.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

// A run of bytes of the fragment being merged, in a doubly linked list.
struct Symbol {
  uint32_t begin;  // byte offset in the fragment
  uint32_t n;      // bytes; 0 once merged into its left neighbour
  int32_t prev;    // index, -1 at the start
  int32_t next;    // index, -1 at the end
};

// A candidate merge of symbols[left] and its right neighbour symbols[right]
// into a token with `score`. size = the merged byte length when it was made:
// a candidate whose symbols have changed since no longer matches it.
struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;
};

// Max-heap order: highest score first, then leftmost.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> SpmTokenizer::create(VocabIndex vocab) {
  const bool space_prefix = vocab.vocab().add_space_prefix.value_or(true);
  std::unique_ptr<SpmTokenizer> tok(new SpmTokenizer(std::move(vocab), space_prefix));
  for (int b = 0; b < 256; ++b) {
    if (tok->byte_token_[size_t(b)] < 0) {
      return Status::corrupt(
          "SentencePiece vocabulary has no byte-fallback token for byte 0x{:02X}", b);
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

SpmTokenizer::SpmTokenizer(VocabIndex vocab, bool add_space_prefix)
    : Tokenizer(std::move(vocab)), add_space_prefix_(add_space_prefix) {
  const int32_t n = vocab_.n_vocab();
  scores_ = vocab_.vocab().scores;
  scores_.resize(size_t(n), 0.0f);

  // Byte fallback: "<0xXX>", else the byte itself as a token (as llama.cpp).
  std::vector<int> token_byte(size_t(n), -1);
  for (int b = 0; b < 256; ++b) {
    auto id = vocab_.find(fmt::format("<0x{:02X}>", b));
    if (id) {
      token_byte[size_t(*id)] = b;
    } else {
      id = vocab_.find(std::string(1, static_cast<char>(b)));
    }
    byte_token_[size_t(b)] = id.value_or(-1);
  }

  build_pieces(unescape_spaces, [&token_byte](int32_t id) { return token_byte[size_t(id)]; });
}

void SpmTokenizer::encode_fragment(std::string_view text, bool after_special,
                                   std::vector<int32_t>* out) const {
  std::string frag = add_space_prefix_ && after_special ? " " : "";
  frag.append(text);
  merge_escaped(escape_spaces(frag), out);
}

void SpmTokenizer::merge_escaped(std::string_view text, std::vector<int32_t>* out) const {
  OMNIBUS_CHECK(text.size() < (size_t(1) << 31));
  std::vector<Symbol> syms;
  syms.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(utf8_len_from_lead(text[pos]), text.size() - pos);
    const int32_t index = int32_t(syms.size());
    pos += n;
    syms.push_back(
        Symbol{uint32_t(pos - n), uint32_t(n), index - 1, pos == text.size() ? -1 : index + 1});
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = syms[size_t(left)];
    const uint32_t size = l.n + syms[size_t(right)].n;
    const auto id = vocab_.find(text.substr(l.begin, size));
    if (!id) return;
    queue.push(Bigram{scores_[size_t(*id)], left, right, size});
  };
  for (int32_t i = 1; i < int32_t(syms.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = syms[size_t(b.left)];
    Symbol& r = syms[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // Every merged symbol is a token; a single character may not be, and then
  // falls back to its bytes.
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[size_t(i)].next) {
    const Symbol& s = syms[size_t(i)];
    const std::string_view piece = text.substr(s.begin, s.n);
    if (const auto id = vocab_.find(piece)) {
      out->push_back(*id);
    } else {
      for (char c : piece) out->push_back(byte_token_[static_cast<uint8_t>(c)]);
    }
  }
}

}  // namespace omnibus
