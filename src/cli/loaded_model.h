// LoadedModel: what every subcommand needs before it can run a model — the
// mapped GGUF file, the thread pool, the model and its tokenizer — loaded with
// a progress bar and clear errors.
#pragma once

#include <memory>
#include <string>

#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace omnibus {

struct LoadedModel {
  std::string path;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// `model` is a path or bundled name; threads 0 = all cores.
StatusOr<LoadedModel> load_model_for_cli(const std::string& model, int threads);

}  // namespace omnibus
