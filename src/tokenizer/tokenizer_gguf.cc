// Tokenizer::from_gguf: TokenizerVocab from the tokenizer.ggml.* metadata.

#include <fmt/format.h>

#include <cctype>

#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace omnibus {
namespace {

// A key that is present must have the expected type: kCorrupt otherwise.
Status wrong_type(const GgufFile& f, std::string_view key, std::string_view expected) {
  return Status::corrupt("{}: metadata key '{}' is not {}", f.path(), key, expected);
}

Status read_id(const GgufFile& f, std::string_view key, std::optional<int32_t>* id) {
  if (!f.find(key)) return Status::ok();
  const auto v = f.get_int(key);
  if (!v) return wrong_type(f, key, "an integer");
  // Out-of-range ids are ignored later (VocabIndex::build), as llama.cpp does.
  if (*v >= 0 && *v <= INT32_MAX) *id = static_cast<int32_t>(*v);
  return Status::ok();
}

Status read_flag(const GgufFile& f, std::string_view key, std::optional<bool>* flag) {
  if (!f.find(key)) return Status::ok();
  const auto v = f.get_bool(key);
  if (!v) return wrong_type(f, key, "a bool");
  *flag = *v;
  return Status::ok();
}

Status read_strings(const GgufFile& f, std::string_view key, std::vector<std::string>* out) {
  if (!f.find(key)) return Status::ok();
  const auto v = f.get_string_array(key);
  if (!v) return wrong_type(f, key, "an array of strings");
  out->assign(v->begin(), v->end());
  return Status::ok();
}

// The special-token ids, read from tokenizer.ggml.<name>_token_id; the FIM
// ids also from their older names when the newer ones are absent.
using V = TokenizerVocab;
struct IdKey {
  std::string_view name;
  std::optional<int32_t> V::*id;
};
constexpr IdKey kIdKeys[] = {
    {"bos", &V::bos_id},         {"eos", &V::eos_id},         {"eot", &V::eot_id},
    {"eom", &V::eom_id},         {"unknown", &V::unk_id},     {"padding", &V::pad_id},
    {"seperator", &V::sep_id},   {"fim_pre", &V::fim_pre_id}, {"fim_suf", &V::fim_suf_id},
    {"fim_mid", &V::fim_mid_id}, {"fim_pad", &V::fim_pad_id}, {"fim_rep", &V::fim_rep_id},
    {"fim_sep", &V::fim_sep_id}};
constexpr IdKey kOldFimKeys[] = {
    {"prefix", &V::fim_pre_id}, {"suffix", &V::fim_suf_id}, {"middle", &V::fim_mid_id}};

Status read_id_of(const GgufFile& f, const IdKey& k, TokenizerVocab* v) {
  return read_id(f, fmt::format("tokenizer.ggml.{}_token_id", k.name), &(v->*k.id));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
  TokenizerVocab v;
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) {
    return Status::not_found("{}: no tokenizer (metadata key 'tokenizer.ggml.model')", f.path());
  }
  v.model = std::string(*model);
  if (const auto name = f.get_string("general.name")) {
    v.model_name = std::string(*name);
    for (char& ch : v.model_name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  }
  if (f.find("tokenizer.ggml.pre")) {
    const auto pre = f.get_string("tokenizer.ggml.pre");
    if (!pre) return wrong_type(f, "tokenizer.ggml.pre", "a string");
    v.pre = std::string(*pre);
  }
  if (!f.find("tokenizer.ggml.tokens")) {
    return Status::not_found("{}: missing metadata key 'tokenizer.ggml.tokens'", f.path());
  }
  OMNIBUS_RETURN_IF_ERROR(read_strings(f, "tokenizer.ggml.tokens", &v.tokens));
  OMNIBUS_RETURN_IF_ERROR(read_strings(f, "tokenizer.ggml.merges", &v.merges));
  if (f.find("tokenizer.ggml.token_type")) {
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (!types) return wrong_type(f, "tokenizer.ggml.token_type", "an array of integers");
    v.token_types.reserve(types->size());
    for (int64_t t : *types) v.token_types.push_back(static_cast<int32_t>(t));
  }
  if (f.find("tokenizer.ggml.scores")) {
    auto scores = f.get_float_array("tokenizer.ggml.scores");
    if (!scores) return wrong_type(f, "tokenizer.ggml.scores", "an array of floats");
    v.scores = std::move(*scores);
  }
  for (const IdKey& k : kIdKeys) OMNIBUS_RETURN_IF_ERROR(read_id_of(f, k, &v));
  for (const IdKey& k : kOldFimKeys) {
    if (!(v.*k.id)) OMNIBUS_RETURN_IF_ERROR(read_id_of(f, k, &v));
  }
  OMNIBUS_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  OMNIBUS_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_eos_token", &v.add_eos));
  OMNIBUS_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix));
  OMNIBUS_RETURN_IF_ERROR(
      read_flag(f, "tokenizer.ggml.normalizer.lowercase", &v.normalizer_lowercase));
  OMNIBUS_RETURN_IF_ERROR(
      read_flag(f, "tokenizer.ggml.normalizer.strip_accents", &v.normalizer_strip_accents));
  if (v.model == "gpt2" && !f.find("tokenizer.ggml.merges")) {
    return Status::corrupt("{}: BPE tokenizer without 'tokenizer.ggml.merges'", f.path());
  }
  return from_vocab(std::move(v));
}

}  // namespace omnibus
