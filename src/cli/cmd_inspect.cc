// `omnibus inspect FILE.gguf`: a GGUF file's metadata and tensor table.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/model_resolve.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_print.h"

namespace omnibus {

void add_inspect_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string file;
    bool all = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table");
  cmd->add_option("file", opt->file, "GGUF file (or bundled model name)")->required();
  cmd->add_flag("--all", opt->all, "Print every element of array metadata (e.g. the vocabulary)");
  cmd->callback([opt, &exit_code] {
    StatusOr<std::string> path = resolve_model_path(opt->file);
    if (!path.is_ok()) {
      std::fprintf(stderr, "omnibus inspect: %s\n", path.status().to_string().c_str());
      exit_code = 1;
      return;
    }
    StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::open(*path);
    if (!file.is_ok()) {
      std::fprintf(stderr, "omnibus inspect: %s\n", file.status().to_string().c_str());
      exit_code = 1;
      return;
    }
    print_gguf(**file, stdout, opt->all);
  });
}

}  // namespace omnibus
