// The pooling endpoints through the engine: POST /v1/embeddings, /v1/rerank
// and /v1/score. Each input (or query-document pair) is one engine request
// (Request::embed: prompt only, pooled in the same steps as everyone's
// generation); the StreamPump collects the vectors and the last one to
// arrive writes the response (no thread waits).
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_server.h"
#include "server/embeddings_request.h"
#include "server/rerank_request.h"

namespace omnibus::server {
namespace {

constexpr const char* kJson = "application/json";

void respond_error(ResponseSink& sink, const ApiError& e) {
  sink.respond(e.status, kJson, e.to_json());
}

}  // namespace

// One pooling call in flight. The pump thread runs its handlers one at a
// time; `remaining` is also decremented by the submitting thread for inputs
// it never submitted, so whoever brings it to 0 responds.
struct ApiServer::PooledCall {
  std::shared_ptr<ResponseSink> sink;
  std::function<std::string(std::vector<std::vector<float>>& vectors)> body;  // the 200 response
  int64_t prompt_tokens = 0;
  std::chrono::steady_clock::time_point start;
  std::atomic<int64_t> remaining{0};
  std::mutex mu;
  std::vector<std::vector<float>> vectors;  // guarded by mu
  std::optional<ApiError> error;            // guarded by mu: the first failure

  void fail(ApiError e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = std::move(e);
  }
  void done(int64_t n, ServerMetrics& metrics) {
    if (remaining.fetch_sub(n) != n) return;
    std::lock_guard<std::mutex> lock(mu);
    if (error) return respond_error(*sink, *error);
    metrics.add_prompt_tokens(prompt_tokens);
    metrics.observe_e2e(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink->respond(200, kJson, body(vectors));
  }
};

void ApiServer::submit_pooled(std::vector<std::vector<int32_t>> prompts,
                              std::shared_ptr<PooledCall> call) {
  Engine& engine = *backend_.engine;
  const int64_t n = int64_t(prompts.size());
  call->start = std::chrono::steady_clock::now();
  for (const auto& p : prompts) call->prompt_tokens += int64_t(p.size());
  call->vectors.resize(size_t(n));
  call->remaining = n;
  for (int64_t i = 0; i < n; ++i) {
    Request r;
    r.prompt = std::move(prompts[size_t(i)]);
    r.embed = true;
    StatusOr<std::shared_ptr<RequestStream>> stream = engine.submit(std::move(r));
    if (!stream.is_ok()) {
      call->fail(ApiError::invalid("input", stream.status().message()));
      return call->done(n - i, metrics_);  // the ones submitted respond when they end
    }
    pump_->add(*stream, [call, i, this](std::vector<EngineEvent>& events) {
      for (EngineEvent& e : events) {
        if (!e.final) continue;
        metrics_.count_finished(finish_reason_name(e.finish));
        if (e.finish != FinishReason::kStop || e.embedding.empty()) {
          call->fail(ApiError::unavailable("the embedding request was aborted"));
        } else {
          std::lock_guard<std::mutex> lock(call->mu);
          call->vectors[size_t(i)] = std::move(e.embedding);
        }
        call->done(1, metrics_);
      }
    });
  }
}

void ApiServer::handle_embeddings(const HttpRequest& req,
                                  const std::shared_ptr<ResponseSink>& sink) {
  if (state_.load() == State::kDraining)
    return respond_error(*sink, ApiError::unavailable("the server is shutting down"));
  const EngineInfo& info = backend_.engine->info();
  if (!info.can_pool) {
    return respond_error(
        *sink, ApiError::invalid("",
                                 "this model does not serve embeddings: start it with --task "
                                 "embed on an embedding model (bert, or a decoder with "
                                 "--pooling last)",
                                 "model_not_supported"));
  }
  const Tokenizer& tok = *backend_.tokenizer;
  ApiResult<EmbeddingSpec> spec = parse_embedding_request(req.body, {tok.n_vocab(), info.n_embd});
  if (!spec.ok()) return respond_error(*sink, spec.error());
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < spec->inputs.size(); ++i) {
    const PromptInput& in = spec->inputs[i];
    std::vector<int32_t> ids =
        in.is_text ? tok.encode(in.text, /*add_special=*/true, /*parse_special=*/true) : in.ids;
    const int32_t end = in.is_text && tok.add_eos() ? tok.eos_id() : -1;
    ApiResult<std::vector<int32_t>> fit = fit_embedding_input(
        std::move(ids), in.is_text, end, spec->truncate_prompt_tokens, info.max_model_len, i);
    if (!fit.ok()) return respond_error(*sink, fit.error());
    if (fit->empty())
      return respond_error(*sink,
                           ApiError::invalid("input", fmt::format("input {} has no tokens", i)));
    prompts.push_back(std::move(*fit));
  }
  auto call = std::make_shared<PooledCall>();
  call->sink = sink;
  // Pooling none: each input's vector is one row per token, each finished alone.
  const int32_t row_dim = info.pooling == PoolingType::kNone ? info.n_embd : 0;
  call->body = [normalize = config_.normalize_embeddings, model = config_.served_model_name,
                dims = spec->dimensions, base64 = spec->base64, row_dim,
                call = call.get()](std::vector<std::vector<float>>& v) {
    int32_t out_dim = 0;
    for (std::vector<float>& e : v) {
      if (row_dim == 0) {
        e = finish_embedding(std::move(e), normalize, dims);
        continue;
      }
      std::vector<float> rows;
      for (size_t r = 0; r + size_t(row_dim) <= e.size(); r += size_t(row_dim)) {
        std::vector<float> one = finish_embedding(
            {e.begin() + std::ptrdiff_t(r), e.begin() + std::ptrdiff_t(r + row_dim)}, normalize,
            dims);
        out_dim = int32_t(one.size());
        rows.insert(rows.end(), one.begin(), one.end());
      }
      e = std::move(rows);
    }
    return embedding_response(v, base64, model, call->prompt_tokens, row_dim > 0 ? out_dim : 0);
  };
  submit_pooled(std::move(prompts), std::move(call));
}

namespace {

void replace_all(std::string& s, std::string_view what, std::string_view with) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size())) {
    s.replace(at, what.size(), with);
  }
}

// One query-document pair's tokens, as llama-server forms them: the model's
// rerank template with {query} and {document} replaced (special tokens
// parsed, none added), else [BOS] query [EOS] document [EOS].
std::vector<int32_t> pair_prompt(const Tokenizer& tok, const std::string& tmpl,
                                 const std::string& query, const std::string& doc) {
  if (!tmpl.empty()) {
    std::string text = tmpl;
    replace_all(text, "{query}", query);
    replace_all(text, "{document}", doc);
    return tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  }
  std::vector<int32_t> p;
  if (tok.add_bos() && tok.bos_id() >= 0) p.push_back(tok.bos_id());
  for (const std::string* part : {&query, &doc}) {
    const std::vector<int32_t> ids = tok.encode(*part, /*add_special=*/false,
                                                /*parse_special=*/false);
    p.insert(p.end(), ids.begin(), ids.end());
    if (tok.add_eos() && tok.eos_id() >= 0) p.push_back(tok.eos_id());
  }
  return p;
}

}  // namespace

void ApiServer::handle_pairs(bool rerank, const HttpRequest& req,
                             const std::shared_ptr<ResponseSink>& sink) {
  if (state_.load() == State::kDraining)
    return respond_error(*sink, ApiError::unavailable("the server is shutting down"));
  const EngineInfo& info = backend_.engine->info();
  if (info.pooling != PoolingType::kRank || !info.can_pool) {
    return respond_error(
        *sink, ApiError::invalid(
                   "",
                   fmt::format("{} needs a reranker (a cross-encoder served with "
                               "rank pooling); this model pools '{}'",
                               rerank ? "/v1/rerank" : "/v1/score", pooling_name(info.pooling)),
                   "model_not_supported"));
  }
  ApiResult<PairSpec> spec =
      rerank ? parse_rerank_request(req.body, 2048) : parse_score_request(req.body, 2048);
  if (!spec.ok()) return respond_error(*sink, spec.error());
  const Tokenizer& tok = *backend_.tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < spec->pairs.size(); ++i) {
    std::vector<int32_t> p =
        pair_prompt(tok, backend_.rerank_template, spec->pairs[i].first, spec->pairs[i].second);
    if (int64_t(p.size()) > info.max_model_len) {
      return respond_error(
          *sink, ApiError::invalid(rerank ? "documents" : "text_2",
                                   fmt::format("pair {} has {} tokens, more than the model's "
                                               "maximum context length of {} tokens",
                                               i, p.size(), info.max_model_len)));
    }
    prompts.push_back(std::move(p));
  }
  auto call = std::make_shared<PooledCall>();
  call->sink = sink;
  call->body = [s = std::move(*spec), model = config_.served_model_name,
                call = call.get()](std::vector<std::vector<float>>& v) {
    std::vector<float> scores;
    for (const std::vector<float>& e : v) scores.push_back(e.at(0));
    return pair_response(s, scores, model, call->prompt_tokens);
  };
  submit_pooled(std::move(prompts), std::move(call));
}

}  // namespace omnibus::server
