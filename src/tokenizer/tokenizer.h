// Tokenizer: text <-> token ids for a model's vocabulary, and StreamDecoder,
// which turns a stream of ids into text without splitting UTF-8 characters.
//
// A Tokenizer is built from the GGUF tokenizer.ggml.* metadata (from_gguf) or
// from plain data (from_vocab, for tests and tools). tokenizer.ggml.model
// chooses the algorithm: "gpt2" is byte-level BPE (bpe_tokenizer.h);
// "llama" is SentencePiece (spm_tokenizer.h); "bert" is WordPiece
// (wordpiece_tokenizer.h). This class does what both
// share: BOS / EOS, cutting special tokens out of the text
// (special_split.h) and token pieces; a subclass only encodes the plain text
// between special tokens (encode_fragment) and says how its tokens spell
// bytes (build_pieces).
// Ids, special-token handling and the EOG set follow llama.cpp so that
// omnibus and llama.cpp read the same prompt as the same tokens
// (tests/golden/tokenizer/ holds llama.cpp's answers for many strings).
//
// Thread-safety: a Tokenizer is immutable after construction; all methods are
// const and safe to call from many threads at once. A StreamDecoder is one
// stream's state: use it from one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"
#include "tokenizer/vocab_index.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads tokenizer.ggml.* from a model file. kNotFound when the file has no
  // vocabulary, kCorrupt when it is malformed, kUnsupported for tokenizer
  // models / pre-tokenizers omnibus does not implement.
  static StatusOr<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
  // The same from plain data.
  static StatusOr<std::unique_ptr<Tokenizer>> from_vocab(TokenizerVocab vocab);

  // Text -> ids. add_special: prepend BOS / append EOS when the model's
  // metadata asks for them (tokenizer.ggml.add_bos_token / add_eos_token, else
  // the model type's default; SmolLM2 adds neither). parse_special: text of
  // control tokens (e.g. "<|im_start|>") becomes those tokens; when false it is
  // tokenized as plain text. User-defined tokens are always matched.
  // Invalid UTF-8 in `text` is never an error: BPE reads it as U+FFFD,
  // SentencePiece keeps its bytes (byte-fallback tokens), as llama.cpp does.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes token `id` stands for: plain tokens decode to their raw bytes (a
  // piece may be part of a UTF-8 character); user-defined tokens give their
  // text; control and unknown tokens give their text only when render_special,
  // else "". Ids out of range give "".
  std::string token_to_piece(int32_t id, bool render_special = false) const;

  // Concatenated pieces (may end in an incomplete UTF-8 character; use
  // StreamDecoder for streaming).
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const;

  int32_t n_vocab() const { return vocab_.n_vocab(); }
  int32_t bos_id() const { return vocab_.bos_id(); }  // -1 when absent
  int32_t eos_id() const { return vocab_.eos_id(); }  // -1 when absent
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_eos() const { return vocab_.add_eos(); }

  // End-of-generation tokens: EOS, EOT, EOM, FIM pad/repo/sep and every token
  // llama.cpp treats as ending a turn by its text (<|im_end|>, <|endoftext|>,
  // <end_of_turn>, <|eot_id|>, ...). Sorted.
  bool is_eog(int32_t id) const { return vocab_.is_eog(id); }
  const std::vector<int32_t>& eog_ids() const { return vocab_.eog_ids(); }

  // Exact vocabulary lookup of a token's text (byte-level alphabet for BPE:
  // " the" is "Ġthe").
  std::optional<int32_t> token_id(std::string_view piece) const { return vocab_.find(piece); }
  // Control, user-defined or unknown token.
  bool is_special(int32_t id) const;

  const VocabIndex& vocab() const { return vocab_; }

 protected:
  explicit Tokenizer(VocabIndex vocab) : vocab_(std::move(vocab)) {}

  // Appends the ids of `fragment`, text with no special token in it.
  // after_special: the fragment starts the text or follows a special token.
  virtual void encode_fragment(std::string_view fragment, bool after_special,
                               std::vector<int32_t>* out) const = 0;

  // Fills pieces_; each subclass's constructor calls it once. Unknown,
  // control and user-defined tokens: their text; normal tokens: their text
  // through normal_piece; byte tokens: the byte byte_of(id) names (none when
  // it is negative); other tokens: "".
  void build_pieces(const std::function<std::string(std::string_view text)>& normal_piece,
                    const std::function<int(int32_t id)>& byte_of);

  const VocabIndex vocab_;

 private:
  std::vector<std::string> pieces_;  // [n_vocab] token_to_piece(id, true)
};

// Incremental detokenizer for one output stream. push() returns only complete,
// valid UTF-8: bytes of a character split across tokens are held until the
// rest arrives; bytes that can never form a character become U+FFFD.
class StreamDecoder {
 public:
  // REQUIRES: tok outlives this decoder.
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false)
      : tok_(tok), render_special_(render_special) {}

  // The newly completed text (maybe "").
  std::string push(int32_t id);
  // Whatever is held back, with an incomplete trailing character as U+FFFD;
  // the decoder is then empty.
  std::string flush();

 private:
  const Tokenizer& tok_;
  const bool render_special_;
  std::string pending_;  // bytes not returned yet
};

}  // namespace omnibus
