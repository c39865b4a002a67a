// Tests only: where a test finds the checkout's data files (tests/golden/...)
// and the models.
//
// CMake defines OMNIBUS_SOURCE_DIR (the checkout) for every test binary; the
// environment variable of the same name overrides it at run time (ctest sets
// it). Models are looked up in $OMNIBUS_MODELS_DIR when set (models kept
// outside the checkout, as scripts/test.sh and the Python tests use it), else
// in the checkout's models/. A test skips when its model is missing.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#ifndef OMNIBUS_SOURCE_DIR
#error "util/testdata.h is for test binaries (CMake defines OMNIBUS_SOURCE_DIR for them)"
#endif

namespace omnibus::testdata {

inline std::string source_dir() {
  if (const char* env = std::getenv("OMNIBUS_SOURCE_DIR"); env && *env) return env;
  return OMNIBUS_SOURCE_DIR;
}

// The path of a model file such as "smollm2-135m.gguf" (it may not exist).
inline std::string model_path(std::string_view file_name) {
  if (const char* dir = std::getenv("OMNIBUS_MODELS_DIR"); dir && *dir) {
    return std::string(dir) + "/" + std::string(file_name);
  }
  return source_dir() + "/models/" + std::string(file_name);
}

inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// The whole file, byte for byte; "" when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace omnibus::testdata
