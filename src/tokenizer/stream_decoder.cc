#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace omnibus {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the longest decidable prefix of *pending into the result: complete
// characters as they are, bytes that can never become valid as U+FFFD. With
// `final`, an incomplete tail is replaced too.
std::string drain(std::string* pending, bool final) {
  std::string out;
  size_t pos = 0;
  while (pos < pending->size()) {
    const int n = unicode::utf8_sequence_status(*pending, pos);
    if (n > 0) {
      out.append(*pending, pos, static_cast<size_t>(n));
      pos += static_cast<size_t>(n);
    } else if (n < 0) {
      out += kReplacement;
      ++pos;
    } else if (final) {  // an incomplete character at the end
      out += kReplacement;
      pos = pending->size();
    } else {
      break;  // wait for the rest of the character
    }
  }
  pending->erase(0, pos);
  return out;
}

}  // namespace

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, render_special_);
  return drain(&pending_, /*final=*/false);
}

std::string StreamDecoder::flush() { return drain(&pending_, /*final=*/true); }

}  // namespace omnibus
