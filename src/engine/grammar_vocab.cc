#include "engine/grammar_vocab.h"

namespace omnibus {

grammar::VocabBytes grammar_vocab(const Tokenizer& tok) {
  grammar::VocabBytes v;
  const int32_t n = tok.n_vocab();
  v.pieces.resize(size_t(n));
  v.maskable.assign(size_t(n), false);
  constexpr uint32_t kSpellable = kAttrNormal | kAttrByte | kAttrUserDefined;
  for (int32_t id = 0; id < n; ++id) {
    if ((tok.vocab().attr(id) & kSpellable) == 0 || tok.is_eog(id)) continue;
    v.pieces[size_t(id)] = tok.token_to_piece(id);
    v.maskable[size_t(id)] = !v.pieces[size_t(id)].empty();
  }
  v.eog_ids = tok.eog_ids();
  return v;
}

std::shared_ptr<const grammar::VocabTrie> grammar_trie(const Tokenizer& tok) {
  return std::make_shared<const grammar::VocabTrie>(grammar_vocab(tok));
}

}  // namespace omnibus
