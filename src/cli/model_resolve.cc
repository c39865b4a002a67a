#include "cli/model_resolve.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace omnibus {
namespace fs = std::filesystem;

const std::vector<std::string>& bundled_model_names() {
  static const std::vector<std::string> names = {"smollm2-135m", "gemma3-270m"};
  return names;
}

static std::vector<fs::path> model_dirs() {
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("OMNIBUS_MODELS_DIR"); env && *env) dirs.emplace_back(env);
  dirs.emplace_back("models");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build/omnibus -> <checkout>/models; also <prefix>/bin/omnibus ->
    // <prefix>/share/omnibus/models
    dirs.push_back(exe.parent_path().parent_path() / "models");
    dirs.push_back(exe.parent_path().parent_path() / "share" / "omnibus" / "models");
  }
  return dirs;
}

StatusOr<std::string> resolve_model_path(const std::string& model) {
  std::error_code ec;
  if (fs::is_regular_file(model, ec)) return model;
  const auto& names = bundled_model_names();
  if (std::find(names.begin(), names.end(), model) == names.end()) {
    return Status::not_found(
        "model '{}' is neither a GGUF file nor a bundled model name (bundled: smollm2-135m, "
        "gemma3-270m)",
        model);
  }
  std::string tried;
  for (const fs::path& dir : model_dirs()) {
    const fs::path p = dir / (model + ".gguf");
    if (fs::is_regular_file(p, ec)) return p.string();
    tried += "\n  " + p.string();
  }
  return Status::not_found(
      "bundled model '{}' is not installed; run scripts/fetch_models.sh (looked in:{})", model,
      tried);
}

}  // namespace omnibus
