#include "server/rerank_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "server/json_fields.h"

namespace omnibus::server {
namespace {

ApiResult<nlohmann::json> parse_object(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return ApiError::invalid("", "the request body is not valid JSON", "invalid_json");
  if (!j.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  return j;
}

// A string, or (texts_only false) a list of strings; `allow_objects`: list
// items may be {"text": string} (rerank documents).
bool read_texts(const nlohmann::json& v, bool allow_objects, std::vector<std::string>& out) {
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return true;
  }
  if (!v.is_array() || v.empty()) return false;
  for (const nlohmann::json& x : v) {
    if (x.is_string()) {
      out.push_back(x.get<std::string>());
    } else if (allow_objects && x.is_object() && x.contains("text") && x["text"].is_string()) {
      out.push_back(x["text"].get<std::string>());
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

ApiResult<PairSpec> parse_rerank_request(const std::string& body, int32_t max_pairs) {
  ApiResult<nlohmann::json> j = parse_object(body);
  if (!j.ok()) return j.error();
  JsonFields f(*j);
  std::string query;
  f.get_string("query", query);
  if (f.ok() && f.find("query") == nullptr)
    f.fail(ApiError::invalid("query", "'query' is required"));
  std::vector<std::string> docs;
  const nlohmann::json* d = f.find("documents");
  if (f.ok() && (d == nullptr || d->is_string() || !read_texts(*d, true, docs))) {
    f.fail(ApiError::invalid("documents",
                             "'documents' must be a non-empty list of strings or {\"text\": ...}"));
  }
  PairSpec spec;
  f.get_int("top_n", int32_t(1), INT32_MAX, spec.top_n);
  f.get_bool("return_documents", spec.return_documents);
  std::string ignored;
  f.get_string("model", ignored);
  if (f.ok() && docs.size() > size_t(max_pairs)) {
    f.fail(
        ApiError::invalid("documents", fmt::format("at most {} documents per request", max_pairs)));
  }
  if (!f.ok()) return *f.error();
  for (std::string& doc : docs) spec.pairs.emplace_back(query, std::move(doc));
  return spec;
}

ApiResult<PairSpec> parse_score_request(const std::string& body, int32_t max_pairs) {
  ApiResult<nlohmann::json> j = parse_object(body);
  if (!j.ok()) return j.error();
  JsonFields f(*j);
  std::vector<std::string> a, b;
  for (const auto& [key, out] : {std::pair<const char*, std::vector<std::string>*>{"text_1", &a},
                                 std::pair<const char*, std::vector<std::string>*>{"text_2", &b}}) {
    const nlohmann::json* v = f.find(key);
    if (f.ok() && (v == nullptr || !read_texts(*v, false, *out))) {
      f.fail(ApiError::invalid(
          key, fmt::format("'{}' must be a string or a non-empty list of strings", key)));
    }
  }
  if (f.ok() && a.size() != 1 && a.size() != b.size()) {
    f.fail(ApiError::invalid(
        "text_2", fmt::format("'text_1' has {} texts and 'text_2' {}: give one text_1 or "
                              "lists of the same length",
                              a.size(), b.size())));
  }
  std::string ignored;
  f.get_string("model", ignored);
  if (f.ok() && b.size() > size_t(max_pairs)) {
    f.fail(ApiError::invalid("text_2", fmt::format("at most {} pairs per request", max_pairs)));
  }
  if (!f.ok()) return *f.error();
  PairSpec spec;
  spec.rerank = false;
  for (size_t i = 0; i < b.size(); ++i)
    spec.pairs.emplace_back(a.size() == 1 ? a[0] : a[i], std::move(b[i]));
  return spec;
}

std::string pair_response(const PairSpec& spec, const std::vector<float>& scores,
                          const std::string& model, int64_t prompt_tokens) {
  const nlohmann::json usage = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
  if (!spec.rerank) {
    nlohmann::json data = nlohmann::json::array();
    for (size_t i = 0; i < scores.size(); ++i) {
      data.push_back({{"index", i}, {"object", "score"}, {"score", scores[i]}});
    }
    return nlohmann::json{
        {"id", "score"}, {"object", "list"}, {"model", model}, {"data", data}, {"usage", usage}}
        .dump();
  }
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return scores[x] > scores[y]; });
  if (spec.top_n > 0 && size_t(spec.top_n) < order.size()) order.resize(size_t(spec.top_n));
  nlohmann::json results = nlohmann::json::array();
  for (size_t i : order) {
    nlohmann::json r = {{"index", i}, {"relevance_score", scores[i]}};
    if (spec.return_documents) r["document"] = {{"text", spec.pairs[i].second}};
    results.push_back(std::move(r));
  }
  return nlohmann::json{{"id", "rerank"}, {"model", model}, {"results", results}, {"usage", usage}}
      .dump();
}

}  // namespace omnibus::server
