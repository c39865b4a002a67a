// The vocabulary as structured output sees it (grammar/token_mask.h): each
// token's bytes, whether a grammar may ever choose it, and the end tokens.
//
//   normal and byte tokens:  their bytes (token_to_piece), maskable
//   user-defined tokens:     their text, maskable (a grammar may spell them)
//   control, unknown, unused, undefined: never (except the end tokens, which
//                            the masker allows where the grammar may end)
//
// Thread-safety: a pure function of an immutable Tokenizer.
#pragma once

#include <memory>

#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace omnibus {

grammar::VocabBytes grammar_vocab(const Tokenizer& tok);

// The trie over grammar_vocab(tok), built once per served model.
std::shared_ptr<const grammar::VocabTrie> grammar_trie(const Tokenizer& tok);

}  // namespace omnibus
