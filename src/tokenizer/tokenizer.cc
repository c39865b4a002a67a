#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"

namespace omnibus {

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(TokenizerVocab vocab) {
  const std::string model = vocab.model;
  if (model != "gpt2" && model != "llama") {
    return Status::unsupported("tokenizer model '{}' (tokenizer.ggml.model) is not supported", model);
  }
  OMNIBUS_ASSIGN_OR_RETURN(VocabIndex index, VocabIndex::build(std::move(vocab)));
  if (model == "llama") return SpmTokenizer::create(std::move(index));
  return BpeTokenizer::create(std::move(index));
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id, render_special);
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  return vocab_.in_range(id) && (vocab_.attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown));
}

}  // namespace omnibus
