#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace omnibus {
namespace {

// A normal token's text in the byte-level alphabet -> the bytes it stands for.
// Codepoints outside the alphabet are kept as their UTF-8.
std::string decode_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const uint32_t cp = unicode::decode_utf8_lenient(text, &pos);
    const int b = byte_level::cp_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      unicode::append_utf8(&out, cp);
    }
  }
  return out;
}

// "<0x0A>" -> 0x0A; -1 when not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (char c : text.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

// One symbol of a word being merged: a doubly linked list over a vector.
struct Symbol {
  int32_t sym;   // symbol id; -1 once merged into its left neighbour
  int32_t prev;  // index in the word, -1 at the start
  int32_t next;  // index in the word, -1 at the end
};

// A candidate merge of symbols[left] and symbols[right] (its right neighbour).
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_sym;   // the symbols the merge was computed for: if either has
  int32_t right_sym;  // changed since, the candidate is stale
  int32_t result;     // the merged symbol
};

// Min-heap order: lowest rank first, then leftmost.
bool heap_after(const Candidate& a, const Candidate& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::create(VocabIndex vocab) {
  const auto pre = bpe_pre_type(vocab.vocab().pre);
  if (!pre) {
    return Status::unsupported("BPE pre-tokenizer '{}' (tokenizer.ggml.pre) is not implemented",
                               vocab.vocab().pre);
  }
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(vocab), *pre));
}

BpeTokenizer::BpeTokenizer(VocabIndex vocab, BpePreType pre)
    : Tokenizer(std::move(vocab)), pre_(pre) {
  std::unordered_map<std::string, int32_t> extra;
  for (int b = 0; b < 256; ++b) {
    byte_symbol_[static_cast<size_t>(b)] =
        intern(byte_level::spell(std::string(1, static_cast<char>(b))), &extra);
  }
  const auto& merges = vocab_.vocab().merges;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;  // malformed; llama.cpp cannot apply it either
    const std::string left = m.substr(0, space);
    const std::string right = m.substr(space + 1);
    const int32_t l = intern(left, &extra);
    const int32_t r = intern(right, &extra);
    const int32_t result = intern(left + right, &extra);
    merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), result});  // first rank wins
  }

  build_pieces(decode_byte_level, [this](int32_t id) { return parse_byte_token(vocab_.text(id)); });
}

int32_t BpeTokenizer::intern(const std::string& text,
                             std::unordered_map<std::string, int32_t>* extra) {
  if (auto id = vocab_.find(text)) return *id;
  auto [it, inserted] =
      extra->emplace(text, vocab_.n_vocab() + static_cast<int32_t>(extra_symbols_.size()));
  if (inserted) extra_symbols_.push_back(text);
  return it->second;
}

void BpeTokenizer::encode_fragment(std::string_view text, bool /*after_special*/,
                                   std::vector<int32_t>* out) const {
  const std::vector<uint32_t> cps = unicode::decode_utf8_lenient(text);
  std::vector<uint32_t> word_lens;
  pre_tokenize(pre_.kind, cps, &word_lens);

  std::vector<int32_t> syms;
  std::string utf8;
  size_t cp_pos = 0;
  for (uint32_t len : word_lens) {
    utf8.clear();
    for (size_t i = cp_pos; i < cp_pos + len; ++i) unicode::append_utf8(&utf8, cps[i]);
    cp_pos += len;
    if (pre_.ignore_merges) {
      if (const auto id = vocab_.find(byte_level::spell(utf8))) {  // any token, as llama.cpp
        out->push_back(*id);
        continue;
      }
    }
    syms.clear();
    for (char c : utf8) syms.push_back(byte_symbol_[static_cast<uint8_t>(c)]);
    merge_word(&syms, out);
  }
  OMNIBUS_DCHECK(cp_pos == cps.size());
}

void BpeTokenizer::merge_word(std::vector<int32_t>* syms, std::vector<int32_t>* out) const {
  const int32_t n = static_cast<int32_t>(syms->size());
  if (n == 1) {
    append_symbol((*syms)[0], out);
    return;
  }
  std::vector<Symbol> word(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    word[static_cast<size_t>(i)] =
        Symbol{(*syms)[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::vector<Candidate> heap;
  heap.reserve(static_cast<size_t>(n));
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t ls = word[static_cast<size_t>(left)].sym;
    const int32_t rs = word[static_cast<size_t>(right)].sym;
    const auto it = merges_.find(pair_key(ls, rs));
    if (it == merges_.end()) return;
    heap.push_back(Candidate{it->second.rank, left, right, ls, rs, it->second.result});
    std::push_heap(heap.begin(), heap.end(), heap_after);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_after);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = word[static_cast<size_t>(c.left)];
    Symbol& r = word[static_cast<size_t>(c.right)];
    if (l.sym != c.left_sym || r.sym != c.right_sym || l.next != c.right) continue;  // stale
    l.sym = c.result;
    l.next = r.next;
    if (r.next >= 0) word[static_cast<size_t>(r.next)].prev = c.left;
    r.sym = -1;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = word[static_cast<size_t>(i)].next) {
    append_symbol(word[static_cast<size_t>(i)].sym, out);
  }
}

void BpeTokenizer::append_symbol(int32_t sym, std::vector<int32_t>* out) const {
  if (sym < vocab_.n_vocab()) {
    out->push_back(sym);
    return;
  }
  // Not a token (a merge result or byte symbol missing from the vocabulary):
  // its bytes one by one, where a one-byte token exists (llama.cpp's fallback).
  const std::string& text = extra_symbols_[static_cast<size_t>(sym - vocab_.n_vocab())];
  for (char c : text) {
    if (auto id = vocab_.find(std::string_view(&c, 1))) out->push_back(*id);
  }
}

}  // namespace omnibus
