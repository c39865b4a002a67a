#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace omnibus {

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(TokenizerVocab vocab) {
  const std::string model = vocab.model;
  if (model != "gpt2" && model != "llama" && model != "bert") {
    return Status::unsupported("tokenizer model '{}' (tokenizer.ggml.model) is not supported",
                               model);
  }
  OMNIBUS_ASSIGN_OR_RETURN(VocabIndex index, VocabIndex::build(std::move(vocab)));
  if (model == "llama") return SpmTokenizer::create(std::move(index));
  if (model == "bert") return WordPieceTokenizer::create(std::move(index));
  return BpeTokenizer::create(std::move(index));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && vocab_.add_bos() && vocab_.bos_id() >= 0) out.push_back(vocab_.bos_id());
  bool after_special = true;  // the start counts as following a special token
  for (const TextFragment& f : split_special_tokens(vocab_, text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_fragment(text.substr(f.begin, f.length), after_special, &out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos() && vocab_.eos_id() >= 0) out.push_back(vocab_.eos_id());
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (!vocab_.in_range(id)) return {};
  if (!render_special && (vocab_.attr(id) & (kAttrUnknown | kAttrControl))) return {};
  return pieces_[static_cast<size_t>(id)];
}

void Tokenizer::build_pieces(const std::function<std::string(std::string_view text)>& normal_piece,
                             const std::function<int(int32_t id)>& byte_of) {
  pieces_.assign(static_cast<size_t>(vocab_.n_vocab()), std::string());
  for (int32_t id = 0; id < vocab_.n_vocab(); ++id) {
    const uint32_t attr = vocab_.attr(id);
    std::string& piece = pieces_[static_cast<size_t>(id)];
    if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
      piece = vocab_.text(id);
    } else if (attr & kAttrNormal) {
      piece = normal_piece(vocab_.text(id));
    } else if (attr & kAttrByte) {
      const int b = byte_of(id);
      if (b >= 0) piece.assign(1, static_cast<char>(b));
    }
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, render_special);
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  return vocab_.in_range(id) &&
         (vocab_.attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown));
}

}  // namespace omnibus
