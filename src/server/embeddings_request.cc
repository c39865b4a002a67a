#include "server/embeddings_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <span>

#include "model/pooling.h"
#include "server/json_fields.h"

namespace omnibus::server {
namespace {

void parse_input(JsonFields& f, const EmbeddingLimits& limits, EmbeddingSpec& spec) {
  const nlohmann::json* p = f.find("input");
  if (!p) {
    f.fail(ApiError::invalid("input", "'input' is required"));
    return;
  }
  parse_prompt_list(f, "input", *p, limits.n_vocab, limits.max_inputs, "inputs", spec.inputs);
}

}  // namespace

ApiResult<EmbeddingSpec> parse_embedding_request(const std::string& body,
                                                 const EmbeddingLimits& limits) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return ApiError::invalid("", "the request body is not valid JSON", "invalid_json");
  if (!j.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  JsonFields f(j);
  EmbeddingSpec spec;
  parse_input(f, limits, spec);
  std::string format = "float";
  f.get_string("encoding_format", format);
  if (f.ok() && format != "float" && format != "base64") {
    f.fail(ApiError::invalid("encoding_format",
                             fmt::format("'encoding_format' must be \"float\" or \"base64\", "
                                         "got \"{}\"",
                                         format)));
  }
  spec.base64 = format == "base64";
  f.get_int("dimensions", int32_t(1), std::max(limits.n_embd, 1), spec.dimensions);
  int32_t truncate = 0;
  f.get_int("truncate_prompt_tokens", int32_t(-1), INT32_MAX, truncate);
  if (f.ok() && truncate == 0 && f.find("truncate_prompt_tokens") != nullptr) {
    f.fail(
        ApiError::invalid("truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 or >= 1"));
  }
  spec.truncate_prompt_tokens = truncate;
  std::string ignored;
  f.get_string("model", ignored);
  f.get_string("user", ignored);
  if (!f.ok()) return *f.error();
  return spec;
}

ApiResult<std::vector<int32_t>> fit_embedding_input(std::vector<int32_t> ids, bool from_text,
                                                    int32_t end_token, int32_t truncate,
                                                    int32_t max_len, size_t index) {
  const int32_t k = truncate < 0 ? max_len : truncate;
  if (k > 0 && int64_t(ids.size()) > k) {
    if (!from_text) {
      ids.erase(ids.begin(), ids.end() - k);
    } else {
      const bool keep_end = end_token >= 0 && ids.back() == end_token && k >= 2;
      ids.resize(size_t(k));
      if (keep_end) ids.back() = end_token;
    }
  }
  if (int64_t(ids.size()) > max_len) {
    return ApiError::invalid(
        "input", fmt::format("input {} has {} tokens, more than the model's maximum context "
                             "length of {} tokens (set truncate_prompt_tokens to cut it)",
                             index, ids.size(), max_len));
  }
  return ids;
}

std::vector<float> finish_embedding(std::vector<float> v, bool normalize, int32_t dimensions) {
  if (normalize) l2_normalize(v);
  if (dimensions > 0 && size_t(dimensions) < v.size()) {
    v.resize(size_t(dimensions));
    if (normalize) l2_normalize(v);
  }
  return v;
}

std::string base64_encode(const void* data, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* b = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t(b[i]) << 16 | (i + 1 < n ? uint32_t(b[i + 1]) << 8 : 0) |
                       (i + 2 < n ? uint32_t(b[i + 2]) : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? kAlphabet[v & 63] : '=');
  }
  return out;
}

std::string embedding_response(const std::vector<std::vector<float>>& vectors, bool base64,
                               const std::string& model, int64_t prompt_tokens, int32_t row_dim) {
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    nlohmann::json e = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      // The bytes of float32 values, little-endian (every ISA omnibus runs on).
      e["embedding"] = base64_encode(vectors[i].data(), vectors[i].size() * sizeof(float));
    } else if (row_dim > 0) {
      nlohmann::json rows = nlohmann::json::array();
      for (size_t r = 0; r + size_t(row_dim) <= vectors[i].size(); r += size_t(row_dim)) {
        rows.push_back(std::vector<float>(vectors[i].begin() + std::ptrdiff_t(r),
                                          vectors[i].begin() + std::ptrdiff_t(r + row_dim)));
      }
      e["embedding"] = std::move(rows);
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(std::move(e));
  }
  const nlohmann::json r = {
      {"object", "list"},
      {"data", std::move(data)},
      {"model", model},
      {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  return r.dump();
}

}  // namespace omnibus::server
