// omnibus: an LLM inference server. See README.md; `omnibus --help` lists the
// subcommands and `omnibus <command> --help` their flags.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "kernels/cpu_features.h"

int main(int argc, char** argv) {
  CLI::App app{
      "omnibus: LLM inference on CPUs (continuous batching, paged KV cache, OpenAI API)\n"
      "Models: -m takes a GGUF path or a bundled name (smollm2-135m, gemma3-270m)."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.footer(
      "Environment:\n"
      "  OMNIBUS_ISA=scalar|avx2|avx-vnni|avx512  cap the kernels' ISA tier (default: the best "
      "this CPU has;\n"
      "                                           the server log, bench --json and "
      "/get_server_info name it)\n"
      "  OMNIBUS_NO_SIMD=1                        the scalar reference kernels only");
  // The tier is read (and a bad OMNIBUS_ISA refused, exit code 2) before anything runs.
  (void)omnibus::cpu_features();
  int exit_code = 0;
  omnibus::add_serve_command(app, exit_code);
  omnibus::add_generate_command(app, exit_code);
  omnibus::add_perplexity_command(app, exit_code);
  omnibus::add_bench_command(app, exit_code);
  omnibus::add_inspect_command(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
