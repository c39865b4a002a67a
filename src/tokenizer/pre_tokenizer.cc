#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/unicode.h"
#include "util/check.h"

namespace omnibus {
namespace {

using unicode::CpClass;

// The length of the contraction 's 't 're 've 'm 'll 'd at cps[pos] (within
// end), or 0. fold_case: the letters match in either ASCII case ([sS], as
// the Llama 3 regex writes them).
size_t contraction_length(const std::vector<uint32_t>& cps, size_t pos, size_t end,
                          bool fold_case) {
  if (cps[pos] != '\'' || pos + 1 >= end) return 0;
  const auto letter = [&](size_t p) -> uint32_t {
    const uint32_t c = cps[p];
    return fold_case && c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
  };
  const uint32_t c1 = letter(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= end) return 0;
  const uint32_t c2 = letter(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

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

  size_t pos = begin;
  const auto emit = [&](size_t word_end) {
    OMNIBUS_DCHECK(word_end > pos && word_end <= end);
    out->push_back(static_cast<uint32_t>(word_end - pos));
    pos = word_end;
  };

  while (pos < end) {
    const uint32_t cp = cps[pos];
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
    if (const size_t n = contraction_length(cps, pos, end, /*fold_case=*/false); n > 0) {
      emit(pos + n);
      continue;
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

// The Llama 3 regex (max_digits = 3) or Qwen 2's (max_digits = 1) over all
// of cps; appends word lengths. The alternatives are tried in the regex's
// order; each branch below is the match that alternative makes.
void split_llama3(const std::vector<uint32_t>& cps, size_t max_digits, std::vector<uint32_t>* out) {
  const size_t end = cps.size();
  const auto is = [&](size_t p, CpClass c) { return p < end && unicode::cp_class(cps[p]) == c; };
  const auto is_cr_lf = [&](size_t p) { return p < end && (cps[p] == '\r' || cps[p] == '\n'); };

  size_t pos = 0;
  const auto emit = [&](size_t word_end) {
    OMNIBUS_DCHECK(word_end > pos && word_end <= end);
    out->push_back(static_cast<uint32_t>(word_end - pos));
    pos = word_end;
  };

  while (pos < end) {
    const uint32_t cp = cps[pos];
    const CpClass cls = unicode::cp_class(cp);
    // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
    if (const size_t n = contraction_length(cps, pos, end, /*fold_case=*/true); n > 0) {
      emit(pos + n);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+: any one codepoint but those before the letters
    const bool may_lead =
        cls != CpClass::kLetter && cls != CpClass::kNumber && cp != '\r' && cp != '\n';
    const size_t letters = may_lead ? pos + 1 : pos;
    if (is(letters, CpClass::kLetter)) {
      size_t e = letters;
      while (is(e, CpClass::kLetter)) ++e;
      emit(e);
      continue;
    }
    // \p{N}{1,3} (Llama 3) or \p{N} (Qwen 2)
    if (cls == CpClass::kNumber) {
      size_t e = pos;
      while (e - pos < max_digits && is(e, CpClass::kNumber)) ++e;
      emit(e);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t others = cp == ' ' ? pos + 1 : pos;
    if (is(others, CpClass::kOther)) {
      size_t e = others;
      while (is(e, CpClass::kOther)) ++e;
      while (is_cr_lf(e)) ++e;
      emit(e);
      continue;
    }
    // Whitespace: \s*[\r\n]+ takes the run up to its last \r or \n; else
    // \s+(?!\S) leaves the run's last codepoint when a non-space follows; else \s+.
    size_t n_ws = 0;
    size_t cr_lf_end = 0;  // one past the run's last \r or \n; 0 when none
    while (is(pos + n_ws, CpClass::kWhitespace)) {
      if (is_cr_lf(pos + n_ws)) cr_lf_end = pos + n_ws + 1;
      ++n_ws;
    }
    if (cr_lf_end > 0) {
      emit(cr_lf_end);
    } else if (n_ws > 1 && pos + n_ws < end) {
      emit(pos + n_ws - 1);
    } else if (n_ws > 0) {
      emit(pos + n_ws);
    } else {
      emit(pos + 1);  // unreachable for valid classes; keeps the scanner total
    }
  }
}

struct NamedPreType {
  std::string_view name;
  BpePreType type;
};

// tokenizer.ggml.pre names as llama.cpp's llama-vocab.cpp maps them (only the
// kinds omnibus implements; see the header).
constexpr BpePreType kGpt2Type{PreTokenizerKind::kGpt2};
constexpr BpePreType kSmollmType{PreTokenizerKind::kSmollm};
constexpr BpePreType kLlama3Type{PreTokenizerKind::kLlama3, /*ignore_merges=*/true,
                                 /*add_bos=*/true};
constexpr BpePreType kLlama3RegexOnly{PreTokenizerKind::kLlama3};  // DBRX, SMAUG
constexpr BpePreType kQwen2Type{PreTokenizerKind::kQwen2};
// Grouped as llama.cpp groups them (hence no clang-format).
// clang-format off
constexpr NamedPreType kPreTypes[] = {
    // LLAMA_VOCAB_PRE_TYPE_GPT2 and MPT
    {"gpt-2", kGpt2Type}, {"phi-2", kGpt2Type}, {"jina-es", kGpt2Type}, {"jina-de", kGpt2Type},
    {"gigachat", kGpt2Type}, {"jina-v2-es", kGpt2Type}, {"jina-v2-de", kGpt2Type},
    {"a.x-4.0", kGpt2Type}, {"mellum", kGpt2Type}, {"modern-bert", kGpt2Type}, {"mpt", kGpt2Type},
    {"jina-v1-en", kGpt2Type}, {"jina-v2-code", kGpt2Type}, {"roberta-bpe", kGpt2Type},
    // STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2
    {"smollm", kSmollmType}, {"starcoder", kSmollmType}, {"refact", kSmollmType},
    {"command-r", kSmollmType}, {"codeshell", kSmollmType}, {"exaone", kSmollmType},
    {"minerva-7b", kSmollmType}, {"mellum2", kSmollmType},
    // LLAMA3 (ignore_merges, add_bos), then DBRX and SMAUG (the same regex only)
    {"llama3", kLlama3Type}, {"llama-v3", kLlama3Type}, {"llama-bpe", kLlama3Type},
    {"falcon3", kLlama3Type}, {"falcon-h1", kLlama3Type}, {"pixtral", kLlama3Type},
    {"midm-2.0", kLlama3Type}, {"lfm2", kLlama3Type}, {"jina-v5-nano", kLlama3Type},
    {"dbrx", kLlama3RegexOnly}, {"smaug-bpe", kLlama3RegexOnly},
    // QWEN2 (megrez too), STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2: one regex
    {"qwen2", kQwen2Type}, {"deepseek-r1-qwen", kQwen2Type}, {"kormo", kQwen2Type},
    {"f2llmv2", kQwen2Type}, {"megrez", kQwen2Type}, {"stablelm2", kQwen2Type},
    {"hunyuan", kQwen2Type}, {"solar-open", kQwen2Type}, {"grok-2", kQwen2Type},
};
// clang-format on

}  // namespace

std::optional<BpePreType> bpe_pre_type(std::string_view pre_name) {
  for (const NamedPreType& t : kPreTypes) {
    if (t.name == pre_name) return t.type;
  }
  return std::nullopt;
}

std::optional<PreTokenizerKind> pre_tokenizer_for(std::string_view pre_name) {
  const auto t = bpe_pre_type(pre_name);
  if (!t) return std::nullopt;
  return t->kind;
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
    case PreTokenizerKind::kLlama3:
      split_llama3(cps, 3, word_lens);
      return;
    case PreTokenizerKind::kQwen2:
      split_llama3(cps, 1, word_lens);
      return;
  }
  OMNIBUS_CHECK(false && "unknown PreTokenizerKind");
}

}  // namespace omnibus
