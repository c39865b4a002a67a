// `omnibus generate`: one prompt from the terminal, streamed, with timings;
// with --chat, a conversation: user lines from stdin, each answer rendered
// through the model's chat template (tokenizer/chat_template.h) and streamed
// until an end-of-generation token. In both modes --stop strings (llama-cli's
// reverse prompts) end a reply; they are never printed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/sampler.h"
#include "model/sequence_runner.h"
#include "server/stop_matcher.h"
#include "tokenizer/chat_template.h"

namespace omnibus {
namespace {

struct GenerateOptions {
  std::string model = "smollm2-135m";
  std::string prompt;
  std::string prompt_file;
  int n_predict = 128;
  int threads = 0;
  int ctx_size = 4096;
  std::string kv_dtype = "f16";
  int kv_residual_blocks = -1;  // --kv-residual-blocks
  bool ignore_eos = false;
  bool show_special = false;
  SamplingParams sampling;
  int64_t seed = -1;
  bool chat = false;
  std::string system;
  std::string chat_template_file;
  std::vector<std::string> stops;  // escapes (\\n, \\t, \\\\) already processed
};

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

void fail(const Status& s, int& exit_code) {
  std::fprintf(stderr, "omnibus generate: %s\n", s.to_string().c_str());
  exit_code = 1;
}


using Clock = std::chrono::steady_clock;

// One interactive conversation. The KV cache keeps the evaluated tokens;
// each turn feeds only what the re-rendered conversation adds after them
// (or starts over when the template re-renders earlier turns differently).
class ChatSession {
 public:
  ChatSession(const GenerateOptions& o, LoadedModel& m, ChatTemplate tmpl, SequenceRunner& runner)
      : o_(o), m_(m), tmpl_(std::move(tmpl)), runner_(runner), n_vocab_(m.model->config().n_vocab),
        sampler_(o.sampling, n_vocab_), logits_(size_t(n_vocab_)) {
    const Tokenizer& tok = *m.tokenizer;
    if (tok.bos_id() >= 0) bos_ = tok.token_to_piece(tok.bos_id(), /*render_special=*/true);
    if (tok.eos_id() >= 0) eos_ = tok.token_to_piece(tok.eos_id(), /*render_special=*/true);
    if (!o.system.empty()) messages_.push_back({"system", o.system});
  }

  // Answers one user message (streamed to stdout); timings to stderr.
  Status turn(const std::string& user) {
    messages_.push_back({"user", user});
    OMNIBUS_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, render_prompt());
    // Reuse the cached prefix when the new prompt extends what was evaluated.
    size_t keep = 0;
    while (keep < evaluated_.size() && keep < prompt.size() && evaluated_[keep] == prompt[keep]) ++keep;
    if (keep < evaluated_.size() || keep == prompt.size()) {
      runner_.reset();
      evaluated_.clear();
      keep = 0;
    }
    const auto t0 = Clock::now();
    StatusOr<std::span<const float>> l =
        runner_.eval(std::span<const int32_t>(prompt.data() + keep, prompt.size() - keep));
    if (!l.is_ok()) return l.status();
    evaluated_ = prompt;
    const auto t1 = Clock::now();

    StreamDecoder decoder(*m_.tokenizer, o_.show_special);
    server::StopMatcher stops(o_.stops);
    std::vector<int32_t> output;
    std::string reply;
    std::string stop_reason = "length";
    for (int i = 0; i < o_.n_predict; ++i) {
      std::copy(l->begin(), l->end(), logits_.begin());
      const SampledToken tok = sampler_.sample(logits_.data(), prompt, output);
      output.push_back(tok.id);
      if (m_.tokenizer->is_eog(tok.id)) {
        stop_reason = "end of generation token";
        break;
      }
      const std::string text = stops.push(decoder.push(tok.id));
      reply += text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      if (stops.stopped()) {
        stop_reason = "stop string";
        break;
      }
      if (runner_.n_past() >= runner_.n_ctx()) {
        stop_reason = "context full";
        break;
      }
      if (i + 1 == o_.n_predict) break;
      const int32_t next = tok.id;
      l = runner_.eval(std::span<const int32_t>(&next, 1));
      if (!l.is_ok()) return l.status();
      evaluated_.push_back(next);
    }
    const std::string rest = stops.stopped() ? std::string() : stops.push(decoder.flush()) + stops.flush();
    reply += rest;
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const auto t2 = Clock::now();
    messages_.push_back({"assistant", reply});

    const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
    const double gen_s = std::chrono::duration<double>(t2 - t1).count();
    const size_t n_new = prompt.size() - keep;
    const size_t n_decode = output.empty() ? 0 : output.size() - 1;
    fmt::print(stderr,
               "[prompt: {} new tokens ({} cached) in {:.1f} ms ({:.1f} tok/s); generated: {} tokens in "
               "{:.1f} ms ({:.1f} tok/s), stopped by {}]\n",
               n_new, keep, prompt_s * 1e3, n_new > 0 ? double(n_new) / prompt_s : 0.0, output.size(),
               gen_s * 1e3, n_decode > 0 ? double(n_decode) / gen_s : 0.0, stop_reason);
    return Status::ok();
  }

 private:
  // The conversation as tokens, with the generation prompt; drops the oldest
  // exchanges (never the system message) until it leaves room for n_predict.
  StatusOr<std::vector<int32_t>> render_prompt() {
    while (true) {
      OMNIBUS_ASSIGN_OR_RETURN(std::string text, tmpl_.render(messages_, /*add_generation_prompt=*/true, bos_, eos_));
      // The template may write the BOS text itself; then the tokenizer must not add another.
      const bool has_bos = !bos_.empty() && text.compare(0, bos_.size(), bos_) == 0;
      std::vector<int32_t> ids = m_.tokenizer->encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
      if (int64_t(ids.size()) + o_.n_predict <= runner_.n_ctx()) return ids;
      const size_t first = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
      if (messages_.size() <= first + 1) {
        return Status::invalid_argument(
            "the message ({} tokens) plus {} tokens to generate exceeds the context size {} (raise --ctx-size)",
            ids.size(), o_.n_predict, runner_.n_ctx());
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
  SequenceRunner& runner_;
  const int32_t n_vocab_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::string bos_, eos_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> evaluated_;  // the tokens in the KV cache, in order
};

int run_chat(GenerateOptions& o, LoadedModel& m, KvFormat kv_dtype) {
  int exit_code = 0;
  StatusOr<ChatTemplate> tmpl = Status::internal("unset");
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    if (!in) return fail(Status::not_found("cannot read chat template '{}'", o.chat_template_file), exit_code), exit_code;
    std::stringstream ss;
    ss << in.rdbuf();
    tmpl = ChatTemplate::parse(ss.str());
  } else {
    tmpl = chat_template_from_gguf(*m.file);
  }
  if (!tmpl.is_ok()) return fail(tmpl.status(), exit_code), exit_code;
  StatusOr<std::unique_ptr<SequenceRunner>> runner =
      SequenceRunner::create(*m.model, o.ctx_size, kv_dtype, 16, o.kv_residual_blocks);
  if (!runner.is_ok()) return fail(runner.status(), exit_code), exit_code;
  ChatSession session(o, m, *tmpl, **runner);

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
    if (Status s = session.turn(user); !s.is_ok()) return fail(s, exit_code), exit_code;
  }
  if (interactive) std::fputc('\n', stdout);
  return exit_code;
}

int run_generate(GenerateOptions& o) {
  int exit_code = 0;
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) {
      fail(Status::not_found("cannot read prompt file '{}'", o.prompt_file), exit_code);
      return exit_code;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    o.prompt = ss.str();
  }
  for (std::string& stop : o.stops) {
    stop = process_escapes(stop);
    if (stop.empty()) return fail(Status::invalid_argument("--stop: a stop string is empty"), exit_code), exit_code;
  }
  if (o.seed >= 0) {
    o.sampling.seed = uint64_t(o.seed);
    o.sampling.has_seed = true;
  }
  StatusOr<KvFormat> kv_dtype = parse_kv_format(o.kv_dtype);
  if (!kv_dtype.is_ok()) return fail(kv_dtype.status(), exit_code), exit_code;
  StatusOr<LoadedModel> m = load_model_for_cli(o.model, o.threads);
  if (!m.is_ok()) return fail(m.status(), exit_code), exit_code;
  const int32_t n_vocab = m->model->config().n_vocab;
  if (Status s = validate(o.sampling, n_vocab); !s.is_ok()) return fail(s, exit_code), exit_code;
  if (o.chat) return run_chat(o, *m, *kv_dtype);

  std::vector<int32_t> prompt = m->tokenizer->encode(o.prompt, /*add_special=*/true,
                                                     /*parse_special=*/true);
  if (prompt.empty()) {
    return fail(Status::invalid_argument("the prompt is empty"), exit_code), exit_code;
  }
  if (int64_t(prompt.size()) + o.n_predict > o.ctx_size) {
    return fail(Status::invalid_argument(
                    "prompt ({} tokens) plus {} tokens to generate exceeds the context size {} "
                    "(raise --ctx-size)",
                    prompt.size(), o.n_predict, o.ctx_size),
                exit_code),
           exit_code;
  }
  StatusOr<std::unique_ptr<SequenceRunner>> runner =
      SequenceRunner::create(*m->model, o.ctx_size, *kv_dtype, 16, o.kv_residual_blocks);
  if (!runner.is_ok()) return fail(runner.status(), exit_code), exit_code;

  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);

  Sampler sampler(o.sampling, n_vocab);
  StreamDecoder decoder(*m->tokenizer, o.show_special);
  server::StopMatcher stops(o.stops);
  std::vector<int32_t> output;
  std::vector<float> logits(static_cast<size_t>(n_vocab));

  const auto t0 = Clock::now();
  StatusOr<std::span<const float>> l = (*runner)->eval(prompt);
  if (!l.is_ok()) return fail(l.status(), exit_code), exit_code;
  const auto t1 = Clock::now();
  std::string stop_reason = "length";
  for (int i = 0; i < o.n_predict; ++i) {
    std::copy(l->begin(), l->end(), logits.begin());
    const SampledToken tok = sampler.sample(logits.data(), prompt, output);
    output.push_back(tok.id);
    if (!o.ignore_eos && m->tokenizer->is_eog(tok.id)) {
      stop_reason = "end of generation token";
      break;
    }
    const std::string text = stops.push(decoder.push(tok.id));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (stops.stopped()) {
      stop_reason = "stop string";
      break;
    }
    if (i + 1 == o.n_predict) break;
    const int32_t next = tok.id;
    l = (*runner)->eval(std::span<const int32_t>(&next, 1));
    if (!l.is_ok()) return fail(l.status(), exit_code), exit_code;
  }
  const std::string rest = stops.stopped() ? std::string() : stops.push(decoder.flush()) + stops.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto t2 = Clock::now();

  const double prompt_s = std::chrono::duration<double>(t1 - t0).count();
  const double gen_s = std::chrono::duration<double>(t2 - t1).count();
  // The first generated token comes from the prompt's logits; the others each
  // cost one decode step.
  const size_t n_decode = output.empty() ? 0 : output.size() - 1;
  fmt::print(stderr,
             "\nprompt: {} tokens in {:.1f} ms ({:.1f} tok/s)\n"
             "generated: {} tokens in {:.1f} ms ({:.1f} tok/s), stopped by {}\n",
             prompt.size(), prompt_s * 1e3, double(prompt.size()) / prompt_s, output.size(),
             gen_s * 1e3, n_decode > 0 ? double(n_decode) / gen_s : 0.0, stop_reason);
  return exit_code;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate a continuation of one prompt, streamed to the terminal, with timings");
  cmd->add_option("-m,--model", o->model, "GGUF path or bundled model name")->capture_default_str();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (special tokens like <|im_start|> are recognised)");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temp", o->sampling.temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p / nucleus (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty,
                  "Repetition penalty (1 = off)")->capture_default_str();
  cmd->add_option("--repeat-last-n", o->sampling.penalty_last_n,
                  "Tokens the penalties look back over (-1 = all)")->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "RNG seed (-1 = random)")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->ctx_size, "Context size in tokens")->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--kv-cache-dtype", o->kv_dtype, "KV cache element type: f16, f32, q8, q4, kivi2")
      ->capture_default_str();
  cmd->add_option("--kv-residual-blocks", o->kv_residual_blocks,
                  "q4/kivi2: completed KV blocks a query still reads in fp16 besides its open one "
                  "(KIVI's residual window; -1 = the format's default: kivi2 1, q4 0)")
      ->capture_default_str()->check(CLI::Range(-1, 64));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--show-special", o->show_special, "Print special tokens' text");
  cmd->add_flag("--chat", o->chat,
                "Interactive chat: read user messages from stdin (one per line, until EOF), answer each "
                "with the model's chat template; -p gives a first message");
  cmd->add_option("--system", o->system, "System prompt for --chat");
  cmd->add_option("--chat-template-file", o->chat_template_file,
                  "Jinja chat template to use instead of the model's (tokenizer.chat_template)");
  cmd->add_option("-r,--stop,--reverse-prompt", o->stops,
                  "Stop a reply where this text appears (not printed; repeatable; \\n and \\t are "
                  "escapes). With --chat and a base model's transcript template, e.g. --stop '\\nUser:'");
  cmd->callback([o, &exit_code] { exit_code = run_generate(*o); });
}

}  // namespace omnibus
