// The architectures omnibus runs, one row each (general.architecture): how
// its config is read (RoPE mode, metadata beyond the common keys) and how
// its weights are loaded. read_model_config (model_config.cc) and load_model
// (model.cc) consult this table and nothing else, so adding an architecture
// is adding a row here, plus its code when it is not a llama-family block.
//
// Thread-safety: the table is constant.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "gguf/gguf_file.h"
#include "model/llama_family.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "util/status.h"

namespace omnibus {

using ArchitectureLoader = StatusOr<std::unique_ptr<Model>> (*)(
    std::shared_ptr<const GgufFile> file, const ModelConfig& config, ThreadPool& pool,
    WeightLoader& weights);

struct Architecture {
  std::string_view name;    // general.architecture
  std::string_view models;  // what ships in it, for messages and docs
  RopeMode rope_mode;       // as llama.cpp's llama_model_rope_type()
  // Metadata beyond the common keys (sliding windows, experts), or null.
  Status (*read_extras)(const GgufFile& f, ModelConfig* c);
  // Null: the llama family's block (llama_family.h) with `family`'s extra tensors.
  ArchitectureLoader load;
  LlamaFamilyOptions family;
};

std::span<const Architecture> architectures();
// The row named `name`, or null.
const Architecture* find_architecture(std::string_view name);
// "llama (Llama 2/3, ...), gemma3 (...), ...": for the unsupported-architecture error.
std::string architecture_list();

}  // namespace omnibus
