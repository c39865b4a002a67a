// One parser for the OpenAI prompt lists (completions' `prompt`, embeddings'
// `input`), declared in openai_request.h. A file of its own so that the API
// parsers' fuzzers link it without the rest of the OpenAI request parser.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/openai_request.h"

namespace omnibus::server {

namespace {

// A non-empty list of integers; false when `v` is not one. Ids outside the
// vocabulary set out_of_range.
bool read_ids(const nlohmann::json& v, int32_t n_vocab, std::vector<int32_t>& out,
              bool& out_of_range) {
  if (!v.is_array() || v.empty()) return false;
  for (const nlohmann::json& x : v) {
    if (!x.is_number_integer()) return false;
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= n_vocab) out_of_range = true;
    out.push_back(int32_t(std::clamp<int64_t>(id, -1, INT32_MAX)));
  }
  return true;
}

}  // namespace

void parse_prompt_list(JsonFields& f, const char* field, const nlohmann::json& p, int32_t n_vocab,
                       int32_t max_items, const char* plural, std::vector<PromptInput>& out) {
  const std::string shape = fmt::format(
      "'{}' must be a string, a list of strings, a list of token ids or a list of lists of token "
      "ids",
      field);
  bool out_of_range = false;
  if (p.is_string()) {
    out.push_back(PromptInput{true, p.get<std::string>(), {}});
  } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
    PromptInput in{false, "", {}};
    if (!read_ids(p, n_vocab, in.ids, out_of_range)) {
      f.fail(ApiError::invalid(field, shape));
      return;
    }
    out.push_back(std::move(in));
  } else if (p.is_array() && !p.empty()) {
    for (const nlohmann::json& x : p) {
      if (int32_t(out.size()) >= max_items) break;
      PromptInput in{x.is_string(), x.is_string() ? x.get<std::string>() : "", {}};
      if (!in.is_text && !read_ids(x, n_vocab, in.ids, out_of_range)) {
        f.fail(ApiError::invalid(field, shape));
        return;
      }
      out.push_back(std::move(in));
    }
    if (p.size() > size_t(max_items)) {
      f.fail(ApiError::invalid(field, fmt::format("at most {} {} per request", max_items, plural)));
    }
  } else {
    f.fail(ApiError::invalid(field,
                             p.is_array() ? fmt::format("'{}' must not be empty", field) : shape));
    return;
  }
  if (out_of_range) {
    f.fail(
        ApiError::invalid(field, fmt::format("{} token ids must be in [0, {})", field, n_vocab)));
  }
  for (const PromptInput& in : out) {
    if (in.is_text && in.text.empty()) {
      f.fail(ApiError::invalid(field, fmt::format("'{}' must not hold an empty string", field)));
    }
  }
}

}  // namespace omnibus::server
