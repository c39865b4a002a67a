#include "server/openai_response.h"

#include <cmath>
#include <string>

namespace omnibus::server {

double json_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
                          int64_t reasoning_tokens) {
  nlohmann::json u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  if (reasoning_tokens >= 0)
    u["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  return u;
}

void append_completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& entries,
                                nlohmann::json& out) {
  if (!out.is_object()) {
    out = nlohmann::json::object();
    out["tokens"] = nlohmann::json::array();
    out["token_logprobs"] = nlohmann::json::array();
    out["top_logprobs"] = nlohmann::json::array();
    out["text_offset"] = nlohmann::json::array();
  }
  for (const TokenLogprob& e : entries) {
    out["tokens"].push_back(token_display(tok, e.token));
    if (e.has_logprob) {
      out["token_logprobs"].push_back(json_logprob(e.logprob));
      nlohmann::json top = nlohmann::json::object();
      for (const auto& [id, lp] : e.top) top[token_display(tok, id)] = json_logprob(lp);
      out["top_logprobs"].push_back(std::move(top));
    } else {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
    }
    out["text_offset"].push_back(e.text_offset);
  }
}

namespace {

nlohmann::json chat_token(const Tokenizer& tok, int32_t id, float lp) {
  const std::string piece = tok.token_to_piece(id, /*render_special=*/true);
  nlohmann::json bytes = nlohmann::json::array();
  for (char c : piece) bytes.push_back(int(static_cast<unsigned char>(c)));
  return {{"token", token_display(tok, id)},
          {"logprob", json_logprob(lp)},
          {"bytes", std::move(bytes)}};
}

}  // namespace

void append_chat_logprobs(const Tokenizer& tok, const std::vector<TokenLogprob>& entries,
                          nlohmann::json& out) {
  if (!out.is_object()) out = {{"content", nlohmann::json::array()}};
  for (const TokenLogprob& e : entries) {
    nlohmann::json t = chat_token(tok, e.token, e.logprob);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : e.top) top.push_back(chat_token(tok, id, lp));
    t["top_logprobs"] = std::move(top);
    out["content"].push_back(std::move(t));
  }
}

nlohmann::json prompt_logprobs_json(const Tokenizer& tok,
                                    const std::vector<TokenLogprob>& entries) {
  nlohmann::json out = nlohmann::json::array();
  auto entry = [&tok](float lp, int32_t rank, int32_t id) {
    return nlohmann::json{
        {"logprob", json_logprob(lp)}, {"rank", rank}, {"decoded_token", token_display(tok, id)}};
  };
  for (const TokenLogprob& e : entries) {
    if (!e.has_logprob) {
      out.push_back(nullptr);
      continue;
    }
    nlohmann::json d = nlohmann::json::object();
    d[std::to_string(e.token)] = entry(e.logprob, e.rank, e.token);
    for (size_t r = 0; r < e.top.size(); ++r) {
      d[std::to_string(e.top[r].first)] = entry(e.top[r].second, int32_t(r) + 1, e.top[r].first);
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace omnibus::server
