// Whether two tokenizers agree on what every token id means: a draft model's
// guesses (engine/draft_model.h) are token ids the target must read as the
// same text. llama.cpp's rule (common_speculative_are_compatible): vocabulary
// sizes within 128 of each other (converters pad), the same BOS/EOS and
// add-BOS behaviour, and the same text for every id both have.
//
// Thread-safety: a pure function of two immutable tokenizers.
#pragma once

#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace omnibus {

inline constexpr int32_t kMaxVocabSizeDifference = 128;

// ok, or kInvalidArgument saying the first difference found.
Status check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft);

}  // namespace omnibus
