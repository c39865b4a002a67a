// `omnibus generate`: one prompt from the terminal, streamed, with timings.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/sampler.h"
#include "model/sequence_runner.h"

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
  bool ignore_eos = false;
  bool show_special = false;
  SamplingParams sampling;
  int64_t seed = -1;
};

void fail(const Status& s, int& exit_code) {
  std::fprintf(stderr, "omnibus generate: %s\n", s.to_string().c_str());
  exit_code = 1;
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
  if (o.seed >= 0) {
    o.sampling.seed = uint64_t(o.seed);
    o.sampling.has_seed = true;
  }
  StatusOr<DType> kv_dtype = parse_kv_dtype(o.kv_dtype);
  if (!kv_dtype.is_ok()) return fail(kv_dtype.status(), exit_code), exit_code;
  StatusOr<LoadedModel> m = load_model_for_cli(o.model, o.threads);
  if (!m.is_ok()) return fail(m.status(), exit_code), exit_code;
  const int32_t n_vocab = m->model->config().n_vocab;
  if (Status s = validate(o.sampling, n_vocab); !s.is_ok()) return fail(s, exit_code), exit_code;

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
      SequenceRunner::create(*m->model, o.ctx_size, *kv_dtype);
  if (!runner.is_ok()) return fail(runner.status(), exit_code), exit_code;

  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);

  using Clock = std::chrono::steady_clock;
  Sampler sampler(o.sampling, n_vocab);
  StreamDecoder decoder(*m->tokenizer, o.show_special);
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
    const std::string text = decoder.push(tok.id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (i + 1 == o.n_predict) break;
    const int32_t next = tok.id;
    l = (*runner)->eval(std::span<const int32_t>(&next, 1));
    if (!l.is_ok()) return fail(l.status(), exit_code), exit_code;
  }
  const std::string rest = decoder.flush();
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
  cmd->add_option("--kv-cache-dtype", o->kv_dtype, "KV cache element type: f16, f32")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--show-special", o->show_special, "Print special tokens' text");
  cmd->callback([o, &exit_code] { exit_code = run_generate(*o); });
}

}  // namespace omnibus
