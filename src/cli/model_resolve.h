// Turning `-m MODEL` into a GGUF path: a path to an existing file is used as
// is; a bundled model name (smollm2-135m, gemma3-270m) is looked up in
// $OMNIBUS_MODELS_DIR, ./models and the models/ folder of the checkout the
// binary was built in. Nothing is ever downloaded: a missing model is an error
// that says how to fetch it (scripts/fetch_models.sh).
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace omnibus {

// The bundled models' names.
const std::vector<std::string>& bundled_model_names();

StatusOr<std::string> resolve_model_path(const std::string& model);

}  // namespace omnibus
