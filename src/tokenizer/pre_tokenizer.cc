#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/unicode.h"
#include "util/check.h"

namespace omnibus {
namespace {

using unicode::CpClass;

// The GPT-2 regex over cps[begin, end); appends word lengths.
void split_gpt2(const std::vector<uint32_t>& cps, size_t begin, size_t end,
                std::vector<uint32_t>* out) {
  // Class of the codepoint at p, or nullopt past the piece (matches nothing).
  const auto cls = [&](size_t p) -> std::optional<CpClass> {
    if (p >= end) return std::nullopt;
    return unicode::cp_class(cps[p]);
  };
  const auto is = [&](size_t p, CpClass c) { return cls(p) == c; };
  const auto is_other = [&](size_t p) { return cls(p) == CpClass::kOther; };
  const auto at = [&](size_t p) -> uint32_t { return p < end ? cps[p] : 0; };

  size_t pos = begin;
  const auto emit = [&](size_t word_end) {
    OMNIBUS_DCHECK(word_end > pos && word_end <= end);
    out->push_back(static_cast<uint32_t>(word_end - pos));
    pos = word_end;
  };

  while (pos < end) {
    const uint32_t cp = cps[pos];
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
    if (cp == '\'' && pos + 1 < end) {
      const uint32_t c1 = at(pos + 1);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        emit(pos + 2);
        continue;
      }
      if (pos + 2 < end) {
        const uint32_t c2 = at(pos + 2);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(pos + 3);
          continue;
        }
      }
    }
    // An optional leading space joins a following letter/number/other run.
    const size_t run = cp == ' ' ? pos + 1 : pos;
    if (is(run, CpClass::kLetter) || is(run, CpClass::kNumber)) {  //  ?\p{L}+ |  ?\p{N}+
      const CpClass c = *cls(run);
      size_t e = run;
      while (is(e, c)) ++e;
      emit(e);
      continue;
    }
    if (is_other(run)) {  //  ?[^\s\p{L}\p{N}]+
      size_t e = run;
      while (is_other(e)) ++e;
      emit(e);
      continue;
    }
    size_t n_ws = 0;
    while (is(pos + n_ws, CpClass::kWhitespace)) ++n_ws;
    if (n_ws > 1 && pos + n_ws < end) {  // \s+(?!\S): leave the last space for the next word
      emit(pos + n_ws - 1);
    } else if (n_ws > 0) {  // \s+
      emit(pos + n_ws);
    } else {
      emit(pos + 1);  // unreachable for valid classes; keeps the scanner total
    }
  }
}

// \p{N} isolated, then GPT-2 inside the pieces in between.
void split_smollm(const std::vector<uint32_t>& cps, std::vector<uint32_t>* out) {
  size_t piece_begin = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (unicode::cp_class(cps[i]) != CpClass::kNumber) continue;
    if (i > piece_begin) split_gpt2(cps, piece_begin, i, out);
    out->push_back(1);
    piece_begin = i + 1;
  }
  if (piece_begin < cps.size()) split_gpt2(cps, piece_begin, cps.size(), out);
}

}  // namespace

std::optional<PreTokenizerKind> pre_tokenizer_for(std::string_view pre_name) {
  if (pre_name == "gpt-2" || pre_name == "phi-2" || pre_name == "jina-es" ||
      pre_name == "jina-de" || pre_name == "gigachat" || pre_name == "jina-v2-es" ||
      pre_name == "jina-v2-de" || pre_name == "a.x-4.0" || pre_name == "mellum" ||
      pre_name == "modern-bert" || pre_name == "mpt" || pre_name == "jina-v1-en" ||
      pre_name == "jina-v2-code" || pre_name == "roberta-bpe") {
    return PreTokenizerKind::kGpt2;
  }
  if (pre_name == "smollm" || pre_name == "starcoder" || pre_name == "refact" ||
      pre_name == "command-r" || pre_name == "codeshell" || pre_name == "exaone" ||
      pre_name == "minerva-7b" || pre_name == "mellum2") {
    return PreTokenizerKind::kSmollm;
  }
  return std::nullopt;
}

void pre_tokenize(PreTokenizerKind kind, const std::vector<uint32_t>& cps,
                  std::vector<uint32_t>* word_lens) {
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      split_gpt2(cps, 0, cps.size(), word_lens);
      return;
    case PreTokenizerKind::kSmollm:
      split_smollm(cps, word_lens);
      return;
  }
  OMNIBUS_CHECK(false && "unknown PreTokenizerKind");
}

}  // namespace omnibus
