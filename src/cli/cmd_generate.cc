// `omnibus generate`: one prompt from the terminal, streamed, with timings;
// with --chat, a conversation: user lines from stdin, each answer rendered
// through the model's chat template (template/chat_template.h) and streamed
// until an end-of-generation token.
//
// Both run on the Engine, one Request per prompt or turn, through
// EngineRequest (cli/engine_request.h): the text is what /v1/completions
// returns for the same request. --stop strings end a reply and are never
// printed (llama-cli's reverse prompts); --min-tokens, --stop-token-ids,
// --ignore-eos, --seed, --num-completions (the API's n) and --logprobs (in
// the --json report) mean what the API's fields mean. In --chat the engine's
// prefix cache keeps the conversation: each turn computes only what its
// re-rendered prompt adds after the blocks already computed.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/engine_request.h"
#include "cli/loaded_model.h"
#include "engine/engine.h"
#include "server/openai_response.h"
#include "template/chat_template.h"

namespace omnibus {
namespace {

struct GenerateOptions {
  ModelFlags model;
  EngineFlags engine;  // the KV format and speculative flags only
  std::string prompt;
  std::string prompt_file;
  int n_predict = 128;
  int ctx_size = 4096;
  bool ignore_eos = false;
  bool show_special = false;
  SamplingParams sampling;
  int64_t seed = -1;
  int min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  int n_completions = 1;
  int logprobs = -1;
  std::string json_path;
  bool chat = false;
  std::string system;
  std::string chat_template_file;
  std::vector<std::string> stops;  // escapes (\\n, \\t, \\\\) already processed
};

using Clock = std::chrono::steady_clock;

// "\\n" -> newline, "\\t" -> tab, "\\\\" -> backslash; other characters stay.
std::string process_escapes(const std::string& in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\\' && i + 1 < in.size()) {
      const char c = in[i + 1];
      if (c == 'n' || c == 't' || c == '\\') {
        out += c == 'n' ? '\n' : c == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
    }
    out += in[i];
  }
  return out;
}

int fail(const Status& s) {
  std::fprintf(stderr, "omnibus generate: %s\n", s.to_string().c_str());
  return 1;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Tokens per second of n tokens in ms milliseconds (0 when there is nothing to rate).
double rate(int64_t n, double ms) { return n > 0 && ms > 0 ? double(n) * 1e3 / ms : 0.0; }

// The engine request for one prompt (or chat turn), with every generation rule of the flags.
Request make_request(const GenerateOptions& o, std::vector<int32_t> prompt) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling = o.sampling;
  r.sampling.n_logprobs = o.logprobs;
  r.max_tokens = o.n_predict;
  r.min_tokens = o.min_tokens;
  r.stop_token_ids = o.stop_token_ids;
  r.ignore_eos = o.ignore_eos && !o.chat;
  r.n = o.n_completions;
  return r;
}

TextOptions request_options(const GenerateOptions& o) { return {o.stops, o.show_special}; }

// One interactive conversation, one engine request per turn.
class ChatSession {
 public:
  ChatSession(const GenerateOptions& o, LoadedModel& m, ChatTemplate tmpl, Engine& engine)
      : o_(o), m_(m), tmpl_(std::move(tmpl)), engine_(engine) {
    const Tokenizer& tok = *m.tokenizer;
    if (tok.bos_id() >= 0) bos_ = tok.token_to_piece(tok.bos_id(), /*render_special=*/true);
    if (tok.eos_id() >= 0) eos_ = tok.token_to_piece(tok.eos_id(), /*render_special=*/true);
    if (!o.system.empty()) messages_.push_back({"system", o.system});
  }

  // Answers one user message (streamed to stdout); timings to stderr.
  Status turn(const std::string& user) {
    messages_.push_back({"user", user});
    OMNIBUS_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, render_prompt());
    const size_t n_prompt = prompt.size();
    OMNIBUS_ASSIGN_OR_RETURN(
        EngineRequest req,
        EngineRequest::submit(engine_, *m_.tokenizer, make_request(o_, std::move(prompt)),
                              request_options(o_)));
    OMNIBUS_ASSIGN_OR_RETURN(EngineRequestResult r, req.wait([](int32_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }));
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const Completion& c = r.completions[0];
    messages_.push_back({"assistant", c.text});

    const size_t keep = size_t(r.n_cached_tokens);
    const double prompt_ms = ms_between(r.submitted, r.first_token);
    const double gen_ms = ms_between(r.first_token, c.end);
    fmt::print(
        stderr,
        "[prompt: {} new tokens ({} cached) in {:.1f} ms ({:.1f} tok/s); generated: {} tokens in "
        "{:.1f} ms ({:.1f} tok/s), stopped by {}]\n",
        n_prompt - keep, keep, prompt_ms, rate(int64_t(n_prompt - keep), prompt_ms), c.n_tokens,
        gen_ms, rate(c.n_tokens - 1, gen_ms), c.stopped_by);
    return Status::ok();
  }

 private:
  // The conversation as tokens, with the generation prompt; drops the oldest
  // exchanges (never the system message) until it leaves room for n_predict.
  StatusOr<std::vector<int32_t>> render_prompt() {
    while (true) {
      OMNIBUS_ASSIGN_OR_RETURN(std::string text,
                               tmpl_.render(messages_, /*add_generation_prompt=*/true, bos_, eos_));
      // The template may write the BOS text itself; then the tokenizer must not add another.
      const bool has_bos = !bos_.empty() && text.compare(0, bos_.size(), bos_) == 0;
      std::vector<int32_t> ids =
          m_.tokenizer->encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
      if (int64_t(ids.size()) + o_.n_predict <= o_.ctx_size) return ids;
      const size_t first = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
      if (messages_.size() <= first + 1) {
        return Status::invalid_argument(
            "the message ({} tokens) plus {} tokens to generate exceeds the context size {} (raise "
            "--ctx-size)",
            ids.size(), o_.n_predict, o_.ctx_size);
      }
      // Drop the oldest user message and the replies up to the next user message.
      auto end = messages_.begin() + std::ptrdiff_t(first) + 1;
      while (end != messages_.end() && end->role != "user") ++end;
      messages_.erase(messages_.begin() + std::ptrdiff_t(first), end);
    }
  }

  const GenerateOptions& o_;
  LoadedModel& m_;
  const ChatTemplate tmpl_;
  Engine& engine_;
  std::string bos_, eos_;
  std::vector<ChatMessage> messages_;
};

int run_chat(const GenerateOptions& o, LoadedModel& m, Engine& engine) {
  StatusOr<ChatTemplate> tmpl = Status::internal("unset");
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    if (!in) return fail(Status::not_found("cannot read chat template '{}'", o.chat_template_file));
    std::stringstream ss;
    ss << in.rdbuf();
    tmpl = ChatTemplate::parse(ss.str());
  } else {
    tmpl = chat_template_from_gguf(*m.file);
  }
  if (!tmpl.is_ok()) return fail(tmpl.status());
  ChatSession session(o, m, *tmpl, engine);

  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) fmt::print(stderr, "chat with {} (end with Ctrl-D)\n", m.path);
  std::vector<std::string> pending;
  if (!o.prompt.empty()) pending.push_back(o.prompt);
  std::string line;
  while (true) {
    if (pending.empty()) {
      if (interactive) {
        std::fputs("> ", stdout);
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, line)) break;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      pending.push_back(line);
    }
    const std::string user = std::move(pending.front());
    pending.erase(pending.begin());
    if (Status s = session.turn(user); !s.is_ok()) return fail(s);
  }
  if (interactive) std::fputc('\n', stdout);
  return 0;
}

// The --json report: what /v1/completions returns for the same request.
Status write_json(const GenerateOptions& o, const LoadedModel& m, const EngineRequestResult& r) {
  nlohmann::json j;
  j["object"] = "text_completion";
  j["model"] = m.path;
  nlohmann::json choices = nlohmann::json::array();
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < r.completions.size(); ++i) {
    const Completion& c = r.completions[i];
    nlohmann::json lp = nullptr;
    if (o.logprobs >= 0) server::append_completion_logprobs(*m.tokenizer, c.logprobs, lp);
    choices.push_back(
        {{"index", i}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", c.finish_reason}});
    completion_tokens += c.n_tokens;
  }
  j["choices"] = std::move(choices);
  j["usage"] = server::usage_json(r.n_prompt_tokens, completion_tokens, r.n_cached_tokens);
  std::ofstream out(o.json_path);
  out << j.dump(2) << "\n";
  if (!out) return Status::io("cannot write '{}'", o.json_path);
  return Status::ok();
}

int run_one_shot(const GenerateOptions& o, LoadedModel& m, Engine& engine) {
  std::vector<int32_t> prompt =
      m.tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) return fail(Status::invalid_argument("the prompt is empty"));
  if (int64_t(prompt.size()) + o.n_predict > o.ctx_size) {
    return fail(
        Status::invalid_argument("prompt ({} tokens) plus {} tokens to generate exceeds the "
                                 "context size {} (raise --ctx-size)",
                                 prompt.size(), o.n_predict, o.ctx_size));
  }
  StatusOr<EngineRequest> req = EngineRequest::submit(
      engine, *m.tokenizer, make_request(o, std::move(prompt)), request_options(o));
  if (!req.is_ok()) return fail(req.status());
  // One completion streams as it comes; several are printed one after another at the end.
  const bool streaming = o.n_completions == 1;
  if (streaming) {
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  StatusOr<EngineRequestResult> r = req->wait([streaming](int32_t, std::string_view text) {
    if (!streaming) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!r.is_ok()) return fail(r.status());
  for (size_t i = 0; i < r->completions.size(); ++i) {
    if (!streaming)
      fmt::print("--- completion {} of {} ---\n{}{}", i + 1, o.n_completions, o.prompt,
                 r->completions[i].text);
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);

  // The first token of a completion comes from the prompt's logits; the
  // others each cost one decode step.
  const double prompt_ms = ms_between(r->first_scheduled, r->first_token);
  fmt::print(stderr, "\nprompt: {} tokens in {:.1f} ms ({:.1f} tok/s)\n", r->n_prompt_tokens,
             prompt_ms, rate(r->n_prompt_tokens, prompt_ms));
  for (size_t i = 0; i < r->completions.size(); ++i) {
    const Completion& c = r->completions[i];
    const double gen_ms = ms_between(r->first_token, c.end);
    fmt::print(stderr, "{}generated: {} tokens in {:.1f} ms ({:.1f} tok/s), stopped by {}\n",
               streaming ? "" : fmt::format("completion {}: ", i + 1), c.n_tokens, gen_ms,
               rate(c.n_tokens - 1, gen_ms), c.stopped_by);
  }
  if (const EngineStats st = engine.stats(); st.spec_draft_tokens > 0) {
    fmt::print(stderr,
               "speculative: {} of {} draft tokens accepted ({:.0f}%), {:.2f} tokens per "
               "verification step\n",
               st.spec_accepted_tokens, st.spec_draft_tokens,
               100.0 * double(st.spec_accepted_tokens) / double(st.spec_draft_tokens),
               1.0 + double(st.spec_accepted_tokens) / double(st.spec_drafts));
  }
  if (!o.json_path.empty()) {
    if (Status s = write_json(o, m, *r); !s.is_ok()) return fail(s);
  }
  return 0;
}

int run_generate(GenerateOptions& o) {
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) return fail(Status::not_found("cannot read prompt file '{}'", o.prompt_file));
    std::stringstream ss;
    ss << in.rdbuf();
    o.prompt = ss.str();
  }
  for (std::string& stop : o.stops) {
    stop = process_escapes(stop);
    if (stop.empty()) return fail(Status::invalid_argument("--stop: a stop string is empty"));
  }
  if (o.chat && (o.n_completions != 1 || o.logprobs >= 0 || !o.json_path.empty())) {
    return fail(Status::invalid_argument(
        "--num-completions, --logprobs and --json are for one-shot prompts, not --chat"));
  }
  if (o.seed >= 0) {
    o.sampling.seed = uint64_t(o.seed);
    o.sampling.has_seed = true;
  }
  StatusOr<EngineConfig> cfg = to_engine_config(o.engine);
  if (!cfg.is_ok()) return fail(cfg.status());
  StatusOr<LoadedModel> m = load_model_for_cli(o.model);
  if (!m.is_ok()) return fail(m.status());
  const int32_t n_ctx_train = m->model->config().n_ctx_train;
  if (n_ctx_train > 0 && o.ctx_size > n_ctx_train) {
    return fail(Status::invalid_argument("--ctx-size {} exceeds the model's context length {}",
                                         o.ctx_size, n_ctx_train));
  }
  cfg->max_model_len = o.ctx_size;
  cfg->max_num_seqs = o.n_completions;
  cfg->eog_ids = m->tokenizer->eog_ids();
  if (Status d = load_draft_model_for_cli(o.engine.draft_model, *m, *cfg); !d.is_ok())
    return fail(d);
  StatusOr<std::unique_ptr<Engine>> engine = Engine::create(*m->model, *cfg);
  if (!engine.is_ok()) return fail(engine.status());
  return o.chat ? run_chat(o, *m, **engine) : run_one_shot(o, *m, **engine);
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto [cmd, o] = add_model_command<GenerateOptions>(
      app, exit_code, "generate",
      "Generate a continuation of one prompt, streamed to the terminal, with timings",
      run_generate);
  cmd->add_option("-p,--prompt", o->prompt,
                  "Prompt text (special tokens like <|im_start|> are recognised)");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temp", o->sampling.temperature, "Temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p / nucleus (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty,
                  "Repetition penalty (1 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", o->sampling.penalty_last_n,
                  "Tokens the penalties look back over (-1 = all)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "RNG seed (-1 = random); completion i uses seed + i")
      ->capture_default_str();
  cmd->add_option("--min-tokens", o->min_tokens,
                  "End-of-generation and --stop-token-ids tokens are suppressed until this many "
                  "were generated")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--stop-token-ids", o->stop_token_ids,
                  "Token ids that end a completion (comma-separated)")
      ->delimiter(',');
  cmd->add_option("--num-completions", o->n_completions,
                  "Completions of the prompt (the API's n), printed one after another")
      ->capture_default_str()
      ->check(CLI::Range(1, 128));
  cmd->add_option(
         "--logprobs", o->logprobs,
         "With --json: each token's logprob and this many alternatives (the API's logprobs)")
      ->check(CLI::Range(0, 20));
  cmd->add_option("--json", o->json_path,
                  "Also write the completions as a /v1/completions response body to this file");
  cmd->add_option("-c,--ctx-size", o->ctx_size, "Context size in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  add_kv_format_flags(*cmd, o->engine);
  add_speculative_flags(*cmd, o->engine);
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--show-special", o->show_special, "Print special tokens' text");
  cmd->add_flag(
      "--chat", o->chat,
      "Interactive chat: read user messages from stdin (one per line, until EOF), answer each "
      "with the model's chat template; -p gives a first message");
  cmd->add_option("--system", o->system, "System prompt for --chat");
  cmd->add_option("--chat-template-file", o->chat_template_file,
                  "Jinja chat template to use instead of the model's (tokenizer.chat_template)");
  cmd->add_option(
      "-r,--stop,--reverse-prompt", o->stops,
      "Stop a reply where this text appears (not printed; repeatable; \\n and \\t are "
      "escapes). With --chat and a base model's transcript template, e.g. --stop '\\nUser:'");
}

}  // namespace omnibus
