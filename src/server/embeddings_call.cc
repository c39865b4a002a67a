// ApiServer::handle_embeddings: POST /v1/embeddings through the engine. Each
// input is one engine request (Request::embed: prompt only, pooled in the
// same steps as everyone's generation); the StreamPump collects the vectors
// and the last one to arrive writes the response.
#include <atomic>
#include <chrono>
#include <mutex>

#include <fmt/format.h>

#include "server/api_server.h"
#include "server/embeddings_request.h"

namespace omnibus::server {
namespace {

constexpr const char* kJson = "application/json";

// One /v1/embeddings call in flight. The pump thread runs its handlers one at
// a time; `remaining` is also decremented by the submitting thread for
// inputs it never submitted, so whoever brings it to 0 responds.
struct EmbeddingCall {
  std::shared_ptr<ResponseSink> sink;
  EmbeddingSpec spec;
  bool normalize = true;
  std::string model;
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
  // Marks n inputs as done; the one that completes the call responds.
  void done(int64_t n, ServerMetrics& metrics) {
    if (remaining.fetch_sub(n) != n) return;
    std::lock_guard<std::mutex> lock(mu);
    if (error) {
      sink->respond(error->status, kJson, error->to_json());
      return;
    }
    for (std::vector<float>& v : vectors) v = finish_embedding(std::move(v), normalize, spec.dimensions);
    metrics.add_prompt_tokens(prompt_tokens);
    metrics.observe_e2e(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink->respond(200, kJson, embedding_response(vectors, spec.base64, model, prompt_tokens));
  }
};

}  // namespace

void ApiServer::handle_embeddings(const HttpRequest& req, const std::shared_ptr<ResponseSink>& sink) {
  if (state_.load() == State::kDraining) {
    return sink->respond(503, kJson, ApiError::unavailable("the server is shutting down").to_json());
  }
  Engine& engine = *backend_.engine;
  const EngineInfo& info = engine.info();
  if (!info.can_pool) {
    const ApiError e = ApiError::invalid("", "this model does not serve embeddings: start it with --task embed on "
                                             "an embedding model (bert, or a decoder with --pooling last)",
                                         "model_not_supported");
    return sink->respond(e.status, kJson, e.to_json());
  }
  const Tokenizer& tok = *backend_.tokenizer;
  ApiResult<EmbeddingSpec> spec = parse_embedding_request(req.body, {tok.n_vocab(), info.n_embd});
  if (!spec.ok()) return sink->respond(spec.error().status, kJson, spec.error().to_json());
  auto call = std::make_shared<EmbeddingCall>();
  call->sink = sink;
  call->normalize = config_.normalize_embeddings;
  call->model = config_.served_model_name;
  call->start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < spec->inputs.size(); ++i) {
    const PromptInput& in = spec->inputs[i];
    std::vector<int32_t> ids = in.is_text ? tok.encode(in.text, /*add_special=*/true, /*parse_special=*/true)
                                          : in.ids;
    const int32_t end = in.is_text && tok.add_eos() ? tok.eos_id() : -1;
    ApiResult<std::vector<int32_t>> fit = fit_embedding_input(std::move(ids), in.is_text, end,
                                                              spec->truncate_prompt_tokens, info.max_model_len, i);
    if (!fit.ok()) return sink->respond(fit.error().status, kJson, fit.error().to_json());
    if (fit->empty()) {
      const ApiError e = ApiError::invalid("input", fmt::format("input {} has no tokens", i));
      return sink->respond(e.status, kJson, e.to_json());
    }
    call->prompt_tokens += int64_t(fit->size());
    prompts.push_back(std::move(*fit));
  }
  const int64_t n = int64_t(prompts.size());
  call->spec = std::move(*spec);
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

}  // namespace omnibus::server
