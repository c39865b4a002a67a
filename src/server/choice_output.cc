#include "server/choice_output.h"

#include <fmt/format.h>

#include <algorithm>

namespace omnibus::server {

bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string token_display(const Tokenizer& tok, int32_t id) {
  const std::string piece = tok.token_to_piece(id, /*render_special=*/true);
  if (is_valid_utf8(piece)) return piece;
  std::string out = "bytes:";
  for (char c : piece) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
  return out;
}

std::vector<TokenLogprob> prompt_token_logprobs(const Tokenizer& tok,
                                                const std::vector<int32_t>& ids,
                                                const std::vector<PromptLogprob>& scored,
                                                int32_t k) {
  std::vector<TokenLogprob> out(ids.size());
  size_t offset = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenLogprob& t = out[i];
    t.token = ids[i];
    t.text_offset = offset;
    offset += tok.token_to_piece(ids[i]).size();
    t.has_logprob = i > 0 && i - 1 < scored.size();
    if (!t.has_logprob) continue;
    const PromptLogprob& p = scored[i - 1];
    t.logprob = p.logprob;
    t.rank = p.rank;
    const size_t n_top = std::min(size_t(std::max(k, 0)), p.top_logprobs.size());
    t.top.assign(p.top_logprobs.begin(), p.top_logprobs.begin() + ptrdiff_t(n_top));
  }
  return out;
}

ChoiceOutput::ChoiceOutput(const Tokenizer& tok, std::vector<std::string> stops, bool want_logprobs,
                           size_t text_base, bool render_special)
    : tok_(tok),
      decoder_(tok, render_special),
      stop_(std::move(stops)),
      want_logprobs_(want_logprobs),
      piece_bytes_(text_base) {}

ChoiceDelta ChoiceOutput::on_event(const EngineEvent& e) {
  ChoiceDelta d;
  if (finished()) return d;
  // The token that ended a sequence by kStop (EOG, stop token) or
  // kGrammarDeadEnd (the grammar rejected it) is not text.
  const bool ending_token =
      e.finish == FinishReason::kStop || e.finish == FinishReason::kGrammarDeadEnd;
  if (e.token >= 0 && !ending_token) {
    n_tokens_ = e.n_output_tokens;
    if (want_logprobs_) {
      d.logprobs.push_back(TokenLogprob{e.token, true, e.logprob, e.top_logprobs, piece_bytes_, 0});
    }
    if (std::find(shown_.begin(), shown_.end(), e.token) != shown_.end()) {
      const std::string piece = tok_.token_to_piece(e.token, /*render_special=*/true);
      piece_bytes_ += piece.size();
      d.text = stop_.push(decoder_.flush() + piece);
    } else {
      piece_bytes_ += tok_.token_to_piece(e.token).size();
      d.text = stop_.push(decoder_.push(e.token));
    }
  } else if (e.token >= 0) {
    n_tokens_ = e.n_output_tokens;  // the EOG / stop token counts as generated
  }
  if (!stop_.stopped() && e.finish != FinishReason::kNone) {
    d.text += stop_.push(decoder_.flush());
    if (!stop_.stopped()) {
      d.text += stop_.flush();
      finish_reason_ = finish_reason_name(e.finish);
    }
  }
  if (stop_.stopped()) finish_reason_ = "stop";
  d.finish_reason = finish_reason_;
  return d;
}

}  // namespace omnibus::server
