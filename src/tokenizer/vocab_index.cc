#include "tokenizer/vocab_index.h"

#include <algorithm>
#include <initializer_list>

#include "tokenizer/pre_tokenizer.h"

namespace omnibus {
namespace {

uint32_t attr_from_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal:
      return kAttrNormal;
    case TokenType::kUnknown:
      return kAttrUnknown;
    case TokenType::kControl:
      return kAttrControl;
    case TokenType::kUserDefined:
      return kAttrUserDefined;
    case TokenType::kUnused:
      return kAttrUnused;
    case TokenType::kByte:
      return kAttrByte;
    case TokenType::kUndefined:
      return kAttrUndefined;
  }
  return kAttrUndefined;
}

using Names = std::initializer_list<std::string_view>;

// Token texts that llama.cpp recognises when the GGUF metadata does not name
// the token (tokenizer.ggml.*_token_id absent).
const Names kEotNames = {"<|eot_id|>",
                         "<|im_end|>",
                         "<|end|>",
                         "<end_of_turn>",
                         "<|endoftext|>",
                         "<|end_of_text|>",
                         "<EOT>",
                         "_<EOT>",
                         "[EOT]",
                         "<\xEF\xBD\x9C"
                         "end\xE2\x96\x81"
                         "of\xE2\x96\x81"
                         "sentence\xEF\xBD\x9C>",
                         "<end_of_utterance>"};
const Names kEomNames = {"<|eom_id|>"};
const Names kFimPreNames = {"<|fim_prefix|>",
                            "<fim-prefix>",
                            "<fim_prefix>",
                            "<\xEF\xBD\x9C"
                            "fim\xE2\x96\x81"
                            "begin\xEF\xBD\x9C>",
                            "<PRE>",
                            "\xE2\x96\x81<PRE>",
                            "<|code_prefix|>",
                            "<|prefix|>"};
const Names kFimSufNames = {"<|fim_suffix|>",
                            "<fim-suffix>",
                            "<fim_suffix>",
                            "<\xEF\xBD\x9C"
                            "fim\xE2\x96\x81"
                            "hole\xEF\xBD\x9C>",
                            "<SUF>",
                            "\xE2\x96\x81<SUF>",
                            "<|code_suffix|>",
                            "<|suffix|>"};
const Names kFimMidNames = {"<|fim_middle|>",
                            "<fim-middle>",
                            "<fim_middle>",
                            "<\xEF\xBD\x9C"
                            "fim\xE2\x96\x81"
                            "end\xEF\xBD\x9C>",
                            "<MID>",
                            "\xE2\x96\x81<MID>",
                            "<|code_middle|>",
                            "<|middle|>"};
const Names kFimPadNames = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const Names kFimRepNames = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const Names kFimSepNames = {"<|file_sep|>"};

// Tokens that end generation whatever the metadata says.
const Names kEogNames = {"<|eot_id|>",
                         "<|im_end|>",
                         "<|end|>",
                         "<|return|>",
                         "<|call|>",
                         "<|flush|>",
                         "<|calls|>",
                         "<end_of_turn>",
                         "<|endoftext|>",
                         "</s>",
                         "<|eom_id|>",
                         "<EOT>",
                         "_<EOT>",
                         "[EOT]",
                         "[EOS]",
                         "<|end_of_text|>",
                         "<end_of_utterance>",
                         "<eos>",
                         "<turn|>",
                         "<|tool_response>",
                         "<\xEF\xBD\x9C"
                         "end\xE2\x96\x81"
                         "of\xE2\x96\x81"
                         "sentence\xEF\xBD\x9C>",
                         "[e~["};

bool in_names(std::string_view text, const Names& names) {
  return std::find(names.begin(), names.end(), text) != names.end();
}

}  // namespace

StatusOr<VocabIndex> VocabIndex::build(TokenizerVocab vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) return Status::corrupt("tokenizer vocabulary is empty");
  if (n >= static_cast<size_t>(INT32_MAX)) return Status::corrupt("tokenizer vocabulary too large");
  if (!vocab.token_types.empty() && vocab.token_types.size() < n) {
    return Status::corrupt("tokenizer.ggml.token_type has {} entries for {} tokens",
                           vocab.token_types.size(), n);
  }
  if (!vocab.scores.empty() && vocab.scores.size() < n) {
    return Status::corrupt("tokenizer.ggml.scores has {} entries for {} tokens",
                           vocab.scores.size(), n);
  }

  VocabIndex x;
  x.attrs_.resize(n, kAttrNormal);
  x.token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string& t = vocab.tokens[i];
    if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp names them
    if (!x.token_to_id_.emplace(t, static_cast<int32_t>(i)).second) {
      return Status::corrupt("tokenizer vocabulary has token '{}' twice (id {})", t, i);
    }
    if (!vocab.token_types.empty()) x.attrs_[i] = attr_from_type(vocab.token_types[i]);
  }
  x.vocab_ = std::move(vocab);
  const TokenizerVocab& v = x.vocab_;
  const int32_t n_vocab = static_cast<int32_t>(n);

  // Defaults per model type, then the metadata (ignored when out of range).
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_eos = false;
  if (v.model == "gpt2") {
    bos = 11, eos = 11;
    if (const auto pre = bpe_pre_type(v.pre)) add_bos = pre->add_bos;  // Llama 3: true
  } else if (v.model == "llama") {
    bos = 1, eos = 2, unk = 0, add_bos = true;
  } else if (v.model == "bert") {
    bos = 101, eos = 102, unk = 100, add_bos = true, add_eos = true;
  }
  const auto resolve = [&](std::optional<int32_t> given, int32_t dflt) {
    if (dflt >= n_vocab) dflt = -1;
    return given && *given >= 0 && *given < n_vocab ? *given : dflt;
  };
  x.bos_id_ = resolve(v.bos_id, bos);
  x.eos_id_ = resolve(v.eos_id, eos);
  x.unk_id_ = resolve(v.unk_id, unk);
  x.eot_id_ = resolve(v.eot_id, -1);
  x.eom_id_ = resolve(v.eom_id, -1);
  int32_t fim_pad = resolve(v.fim_pad_id, -1);
  int32_t fim_rep = resolve(v.fim_rep_id, -1);
  int32_t fim_sep = resolve(v.fim_sep_id, -1);
  int32_t fim_pre = resolve(v.fim_pre_id, -1);
  int32_t fim_suf = resolve(v.fim_suf_id, -1);
  int32_t fim_mid = resolve(v.fim_mid_id, -1);
  x.add_bos_ = v.add_bos.value_or(add_bos);
  x.add_eos_ = v.add_eos.value_or(add_eos);
  if (v.model == "bert") {
    // WordPiece (llama.cpp's WPM) always wraps a text in [CLS] ... [SEP]: the
    // appended token is the separator, whatever add_*_token and eos say.
    x.eos_id_ = resolve(v.sep_id, eos);
    x.add_bos_ = x.add_eos_ = true;
  }

  // Unnamed special tokens found by text (the lowest id wins); each becomes a
  // control token.
  const auto detect = [&](int32_t* id, const Names& names) {
    if (*id != -1) return;
    for (int32_t i = 0; i < n_vocab; ++i) {
      if (in_names(x.text(i), names)) {
        *id = i;
        x.attrs_[static_cast<size_t>(i)] |= kAttrControl;
        return;
      }
    }
  };
  detect(&x.eot_id_, kEotNames);
  detect(&x.eom_id_, kEomNames);
  detect(&fim_pre, kFimPreNames);
  detect(&fim_suf, kFimSufNames);
  detect(&fim_mid, kFimMidNames);
  detect(&fim_pad, kFimPadNames);
  detect(&fim_rep, kFimRepNames);
  detect(&fim_sep, kFimSepNames);

  // Control tokens named "...unused..." are unused.
  for (int32_t i = 0; i < n_vocab; ++i) {
    uint32_t& a = x.attrs_[static_cast<size_t>(i)];
    if ((a & kAttrControl) && x.text(i).find("unused") != std::string::npos) a |= kAttrUnused;
  }

  // End of generation.
  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad, fim_rep, fim_sep}) {
    if (id != -1) eog.push_back(id);
  }
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (in_names(x.text(i), kEogNames)) {
      eog.push_back(i);
      x.attrs_[static_cast<size_t>(i)] |= kAttrControl;
    }
  }
  for (int32_t id : {x.eos_id_, x.eot_id_, x.eom_id_}) {
    if (id != -1) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  const auto eog_with = [&](std::string_view name) -> int32_t {
    for (int32_t id : eog) {
      if (x.text(id) == name) return id;
    }
    return -1;
  };
  // gpt-oss / solar-open: "<|end|>" ends a message, not the generation.
  const int32_t end_id = eog_with("<|end|>");
  const bool has_call = eog_with("<|call|>") != -1 || eog_with("<|calls|>") != -1;
  if (end_id != -1 && has_call && (eog_with("<|return|>") != -1 || eog_with("<|flush|>") != -1)) {
    eog.erase(std::find(eog.begin(), eog.end(), end_id));
    x.attrs_[static_cast<size_t>(end_id)] = kAttrUserDefined;
  }
  // gemma4 / plamo: "</s>" is an ordinary token.
  const int32_t s_id = eog_with("</s>");
  if (s_id != -1 && (eog_with("<|tool_response>") != -1 || eog_with("<|plamo:eos|>") != -1)) {
    eog.erase(std::find(eog.begin(), eog.end(), s_id));
    x.attrs_[static_cast<size_t>(s_id)] = kAttrNormal;
  }
  x.eog_ids_ = std::move(eog);

  // Phi-3 (by general.name, as llama.cpp decides): special tokens swallow the
  // whitespace after them, except <unk>, <s> and <|endoftext|>.
  if (v.model_name.find("phi-3") != std::string::npos ||
      v.model_name.find("phi3") != std::string::npos) {
    for (int32_t i = 0; i < n_vocab; ++i) {
      uint32_t& a = x.attrs_[static_cast<size_t>(i)];
      if (a & (kAttrControl | kAttrUserDefined | kAttrUnknown)) a |= kAttrRstrip;
    }
    const auto set_rstrip = [&](std::string_view text, bool on) {
      const auto it = x.token_to_id_.find(text);
      if (it == x.token_to_id_.end()) return;
      uint32_t& a = x.attrs_[static_cast<size_t>(it->second)];
      a = on ? (a | kAttrRstrip) : (a & ~uint32_t(kAttrRstrip));
    };
    set_rstrip("</s>", true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set_rstrip(t, false);
  }

  for (int32_t i = 0; i < n_vocab; ++i) {
    if (x.attr(i) & (kAttrControl | kAttrUserDefined | kAttrUnknown))
      x.special_by_length_.push_back(i);
  }
  std::stable_sort(x.special_by_length_.begin(), x.special_by_length_.end(),
                   [&](int32_t a, int32_t b) { return x.text(a).size() > x.text(b).size(); });
  return x;
}

std::optional<int32_t> VocabIndex::find(std::string_view text) const {
  auto it = token_to_id_.find(text);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool VocabIndex::is_eog(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

}  // namespace omnibus
