// check_same_vocabulary (tokenizer/vocab_compat.h).
#include "tokenizer/vocab_compat.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace omnibus {

Status check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  const int32_t nt = target.n_vocab(), nd = draft.n_vocab();
  if (std::abs(nt - nd) > kMaxVocabSizeDifference) {
    return Status::invalid_argument(
        "the draft model's vocabulary has {} tokens, the target's {}: more than {} apart", nd, nt,
        kMaxVocabSizeDifference);
  }
  if (target.bos_id() != draft.bos_id() || target.eos_id() != draft.eos_id() ||
      target.add_bos() != draft.add_bos()) {
    return Status::invalid_argument(
        "the draft model's special tokens differ from the target's (BOS {} / {}, EOS {} / {}, "
        "add BOS {} / {})",
        draft.bos_id(), target.bos_id(), draft.eos_id(), target.eos_id(), draft.add_bos(),
        target.add_bos());
  }
  for (int32_t id = 0; id < std::min(nt, nd); ++id) {
    const std::string a = target.token_to_piece(id, /*render_special=*/true);
    const std::string b = draft.token_to_piece(id, /*render_special=*/true);
    if (a != b) {
      return Status::invalid_argument(
          "the draft model's token {} is '{}', the target's '{}': not the same vocabulary", id, b,
          a);
    }
  }
  return Status::ok();
}

}  // namespace omnibus
