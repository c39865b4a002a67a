// The `omnibus` subcommands. Each add_* registers one subcommand, its flags
// and its --help text on the app; main.cc runs whichever the user picked.
// A subcommand's callback sets `exit_code` (0 on success).
#pragma once

#include <CLI/CLI.hpp>

namespace omnibus {

void add_generate_command(CLI::App& app, int& exit_code);
void add_inspect_command(CLI::App& app, int& exit_code);
void add_perplexity_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);

}  // namespace omnibus
