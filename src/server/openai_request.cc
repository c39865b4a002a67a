// OpenAI completion and chat bodies -> GenerationSpec (openai_request.h): every field read,
// typed and bounded, or a 400 naming it.
#include "server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "server/json_fields.h"
#include "server/reasoning_request.h"
#include "server/structured_request.h"
#include "server/tool_request.h"

namespace omnibus::server {
namespace {

constexpr int32_t kMaxTokensLimit = 1 << 20;

// An integer field in [lo, limit], where `limit` is a server setting: a value
// above it gets a 400 that names the limit and the serve flag that sets it.
void get_limited_int(JsonFields& f, const char* key, int32_t lo, int32_t limit, const char* flag,
                     int32_t& out) {
  int32_t x = out;
  f.get_int(key, lo, INT32_MAX, x);
  if (!f.ok()) return;
  if (x > limit) {
    f.fail(ApiError::invalid(key, fmt::format("'{}' must be at most {} (this server's {}), got {}",
                                              key, limit, flag, x)));
    return;
  }
  out = x;
}

// "stream_options" (only with "stream": true).
void parse_stream_options(JsonFields& f, GenerationSpec& spec) {
  if (const nlohmann::json* so = f.find("stream_options")) {
    if (!so->is_object()) {
      f.fail(ApiError::invalid("stream_options", "'stream_options' must be an object"));
    } else if (!spec.stream) {
      f.fail(ApiError::invalid("stream_options",
                               "'stream_options' is only allowed when 'stream' is true"));
    } else {
      JsonFields sf(*so);
      sf.get_bool("include_usage", spec.include_usage);
      if (!sf.ok()) {
        ApiError e = *sf.error();
        e.param = "stream_options." + e.param;
        f.fail(std::move(e));
      }
    }
  }
}

// "logit_bias": token id (a decimal string) -> bias in [-100, 100].
void parse_logit_bias(JsonFields& f, const ParseLimits& limits, SamplingParams& s) {
  if (const nlohmann::json* lb = f.find("logit_bias")) {
    if (!lb->is_object()) {
      f.fail(ApiError::invalid("logit_bias",
                               "'logit_bias' must be an object mapping token ids to biases"));
    } else {
      for (auto it = lb->begin(); it != lb->end() && f.ok(); ++it) {
        const std::string& key = it.key();
        char* end = nullptr;
        errno = 0;
        const long long id = std::strtoll(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id >= limits.n_vocab) {
          f.fail(ApiError::invalid(
              "logit_bias", fmt::format("'logit_bias' key '{}' is not a token id in [0, {})", key,
                                        limits.n_vocab)));
          break;
        }
        if (!it->is_number() || it->get<double>() < -100.0 || it->get<double>() > 100.0) {
          f.fail(ApiError::invalid("logit_bias",
                                   fmt::format("'logit_bias' value for token {} must be a number "
                                               "in [-100, 100]",
                                               key)));
          break;
        }
        s.logit_bias.emplace_back(int32_t(id), it->get<float>());
      }
    }
  }
}

// "stop" (a string or a list) and "stop_token_ids".
void parse_stop(JsonFields& f, const ParseLimits& limits, GenerationSpec& spec) {
  Request& r = spec.base;
  if (const nlohmann::json* st = f.find("stop")) {
    if (st->is_string()) {
      spec.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (const nlohmann::json& x : *st) {
        if (!x.is_string()) {
          f.fail(ApiError::invalid("stop", "'stop' must be a string or a list of strings"));
          break;
        }
        spec.stop.push_back(x.get<std::string>());
      }
    } else {
      f.fail(ApiError::invalid("stop",
                               fmt::format("'stop' must be a string or a list of strings, got {}",
                                           json_type_name(*st))));
    }
    if (int32_t(spec.stop.size()) > limits.max_stop) {
      f.fail(ApiError::invalid(
          "stop", fmt::format("at most {} stop strings are allowed", limits.max_stop)));
    }
    for (const std::string& x : spec.stop) {
      if (x.empty()) f.fail(ApiError::invalid("stop", "stop strings must not be empty"));
    }
  }
  if (const nlohmann::json* st = f.find("stop_token_ids")) {
    bool good = st->is_array();
    if (good) {
      for (const nlohmann::json& x : *st) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= limits.n_vocab) {
          good = false;
          break;
        }
        r.stop_token_ids.push_back(x.get<int32_t>());
      }
    }
    if (!good) {
      f.fail(ApiError::invalid("stop_token_ids",
                               fmt::format("'stop_token_ids' must be a list of token ids in "
                                           "[0, {})",
                                           limits.n_vocab)));
    }
  }
}

// Fields both endpoints share.
void parse_common(JsonFields& f, const ParseLimits& limits, GenerationSpec& spec) {
  f.get_string("model", spec.model);
  parse_structured_output(f, spec);
  f.get_bool("stream", spec.stream);
  parse_stream_options(f, spec);
  Request& r = spec.base;
  SamplingParams& s = r.sampling;
  get_limited_int(f, "n", 1, limits.max_n, "--max-n", r.n);
  f.get_number("temperature", 0.0, 2.0, s.temperature);
  f.get_number("top_p", 0.0, 1.0, s.top_p, /*lo_open=*/true);
  f.get_int("top_k", -1, kMaxTokensLimit, s.top_k);
  f.get_number("min_p", 0.0, 1.0, s.min_p);
  f.get_number("presence_penalty", -2.0, 2.0, s.presence_penalty);
  f.get_number("frequency_penalty", -2.0, 2.0, s.frequency_penalty);
  f.get_number("repetition_penalty", 0.0, 2.0, s.repetition_penalty, /*lo_open=*/true);
  s.penalty_last_n = -1;  // OpenAI/vLLM: penalties see the whole history
  if (f.find("seed")) {
    int64_t seed = 0;
    f.get_int("seed", INT64_MIN, INT64_MAX, seed);
    s.seed = uint64_t(seed);
    s.has_seed = true;
  }
  parse_logit_bias(f, limits, s);
  parse_stop(f, limits, spec);
  f.get_bool("ignore_eos", r.ignore_eos);
  // omnibus: false keeps this request out of speculative decoding (serve
  // --speculative); its output is the same either way.
  f.get_bool("speculative", r.speculative);
  f.get_int("min_tokens", 0, kMaxTokensLimit, r.min_tokens);
  get_limited_int(f, "prompt_logprobs", 0, limits.max_logprobs, "--max-logprobs",
                  spec.prompt_logprobs);
  if (spec.prompt_logprobs >= 0 && spec.stream) {
    f.fail(ApiError::invalid("prompt_logprobs",
                             "'prompt_logprobs' is not available when 'stream' is true"));
  }
  std::string user;
  f.get_string("user", user);
  // vLLM's cache_salt: requests share prefix-cache blocks only with requests
  // of the same salt (engine/request.h).
  f.get_string("cache_salt", r.cache_salt);
  if (r.cache_salt.size() > 1024) {
    f.fail(ApiError::invalid("cache_salt", "'cache_salt' must be a string of at most 1024 bytes"));
  }
}

// min_tokens <= max_tokens, once both are known.
void check_min_tokens(JsonFields& f, const GenerationSpec& spec) {
  if (spec.max_tokens_set && spec.base.min_tokens > spec.base.max_tokens && !spec.echo_only) {
    f.fail(ApiError::invalid("min_tokens",
                             fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})",
                                         spec.base.min_tokens, spec.base.max_tokens)));
  }
}

void parse_prompt(JsonFields& f, const ParseLimits& limits, GenerationSpec& spec) {
  const nlohmann::json* p = f.find("prompt");
  if (!p) {
    f.fail(ApiError::invalid("prompt", "'prompt' is required"));
    return;
  }
  parse_prompt_list(f, "prompt", *p, limits.n_vocab, limits.max_prompts, "prompts", spec.prompts);
}

bool valid_role(const std::string& r) {
  return r == "system" || r == "developer" || r == "user" || r == "assistant" || r == "tool";
}

void parse_messages(JsonFields& f, GenerationSpec& spec) {
  const nlohmann::json* m = f.find("messages");
  if (!m) {
    f.fail(ApiError::invalid("messages", "'messages' is required"));
    return;
  }
  if (!m->is_array()) {
    f.fail(ApiError::invalid("messages",
                             fmt::format("'messages' must be a list, got {}", json_type_name(*m))));
    return;
  }
  if (m->empty()) {
    f.fail(ApiError::invalid("messages", "'messages' must not be empty"));
    return;
  }
  for (size_t i = 0; i < m->size() && f.ok(); ++i) {
    const nlohmann::json& x = (*m)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!x.is_object()) {
      f.fail(ApiError::invalid(where, fmt::format("'{}' must be an object", where)));
      break;
    }
    ChatMessage msg;
    auto role = x.find("role");
    if (role == x.end() || !role->is_string() || !valid_role(role->get<std::string>())) {
      f.fail(ApiError::invalid(where + ".role",
                               fmt::format("'{}.role' must be one of system, developer, user, "
                                           "assistant, tool",
                                           where)));
      break;
    }
    msg.role = role->get<std::string>();
    if (msg.role == "developer")
      msg.role = "system";  // OpenAI's newer name; templates know "system"
    auto content = x.find("content");
    if (content == x.end() || content->is_null()) {
      if (msg.role != "assistant") {
        f.fail(
            ApiError::invalid(where + ".content", fmt::format("'{}.content' is required", where)));
        break;
      }
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const nlohmann::json& part : *content) {
        auto type = part.is_object() ? part.find("type") : part.end();
        auto text = part.is_object() ? part.find("text") : part.end();
        if (!part.is_object() || type == part.end() || *type != "text" || text == part.end() ||
            !text->is_string()) {
          f.fail(ApiError::invalid(where + ".content",
                                   fmt::format("'{}.content' parts must be "
                                               "{{\"type\": \"text\", \"text\": string}}",
                                               where)));
          break;
        }
        msg.content += text->get<std::string>();
      }
    } else {
      f.fail(ApiError::invalid(
          where + ".content",
          fmt::format("'{}.content' must be a string or a list of parts", where)));
      break;
    }
    if (std::optional<ApiError> e = parse_message_tool_fields(x, where, msg)) {
      f.fail(std::move(*e));
      break;
    }
    if (std::optional<ApiError> e = parse_message_reasoning(x, where, msg.reasoning_content)) {
      f.fail(std::move(*e));
      break;
    }
    spec.messages.push_back(std::move(msg));
  }
}

}  // namespace

ApiResult<GenerationSpec> parse_completion_request(const nlohmann::json& body,
                                                   const ParseLimits& limits) {
  if (!body.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  GenerationSpec spec;
  spec.endpoint = Endpoint::kCompletions;
  JsonFields f(body);
  parse_prompt(f, limits, spec);
  parse_common(f, limits, spec);
  f.get_bool("echo", spec.echo);
  int32_t max_tokens = 16;
  f.get_int("max_tokens", 0, kMaxTokensLimit, max_tokens);
  if (f.ok() && max_tokens == 0) {
    if (!spec.echo) {
      f.fail(ApiError::invalid("max_tokens",
                               "'max_tokens' must be >= 1 (0 is allowed only with 'echo')"));
    }
    spec.echo_only = true;
    max_tokens = 1;  // one token is generated and dropped
  }
  spec.base.max_tokens = max_tokens;
  spec.max_tokens_set = true;
  get_limited_int(f, "logprobs", 0, limits.max_logprobs, "--max-logprobs", spec.logprobs);
  if (f.find("best_of") != nullptr) {
    int32_t best_of = spec.base.n;
    get_limited_int(f, "best_of", 1, limits.max_n, "--max-n", best_of);
    if (f.ok() && best_of != spec.base.n) {
      f.fail(ApiError::invalid("best_of", "'best_of' is not supported (only best_of == n)"));
    }
  }
  if (const nlohmann::json* sfx = f.find("suffix")) {
    if (!sfx->is_string() || !sfx->get<std::string>().empty()) {
      f.fail(ApiError::invalid("suffix", "'suffix' is not supported"));
    }
  }
  check_min_tokens(f, spec);
  if (!f.ok()) return *f.error();
  if (spec.logprobs >= 0) spec.base.sampling.n_logprobs = spec.logprobs;
  // One engine computation serves the echoed prompt's logprobs and prompt_logprobs.
  spec.base.prompt_logprobs = std::max(spec.prompt_logprobs, spec.echo ? spec.logprobs : -1);
  return spec;
}

ApiResult<GenerationSpec> parse_chat_request(const nlohmann::json& body,
                                             const ParseLimits& limits) {
  if (!body.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  GenerationSpec spec;
  spec.endpoint = Endpoint::kChat;
  spec.add_special_tokens = false;
  JsonFields f(body);
  parse_messages(f, spec);
  parse_common(f, limits, spec);
  int32_t max_tokens = -1;
  f.get_int("max_tokens", 1, kMaxTokensLimit, max_tokens);
  f.get_int("max_completion_tokens", 1, kMaxTokensLimit, max_tokens);
  if (max_tokens > 0) {
    spec.base.max_tokens = max_tokens;
    spec.max_tokens_set = true;
  }
  bool logprobs = false;
  f.get_bool("logprobs", logprobs);
  int32_t top_logprobs = -1;
  get_limited_int(f, "top_logprobs", 0, limits.max_logprobs, "--max-logprobs", top_logprobs);
  if (top_logprobs >= 0 && !logprobs) {
    f.fail(ApiError::invalid("top_logprobs", "'top_logprobs' requires 'logprobs' to be true"));
  }
  f.get_bool("add_generation_prompt", spec.add_generation_prompt);
  parse_reasoning_request(f, spec.reasoning);
  if (std::optional<ApiError> e = parse_tools(body, spec.tools)) f.fail(std::move(*e));
  check_min_tokens(f, spec);
  if (!f.ok()) return *f.error();
  if (logprobs) {
    spec.logprobs = std::max(top_logprobs, 0);
    spec.base.sampling.n_logprobs = spec.logprobs;
  }
  spec.base.prompt_logprobs = spec.prompt_logprobs;
  return spec;
}

}  // namespace omnibus::server
