// Finding and checking weight tensors by name and shape while a model loads.
//
// Thread-safety: used only during loading.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;
struct GgufTensor;

class WeightLoader {
 public:
  explicit WeightLoader(const GgufFile& file) : file_(file) {}

  // A matrix whose GGUF shape is [n_in, n_out] (ggml order), usable by matmul.
  StatusOr<WeightView> matrix(const std::string& name, int64_t n_in, int64_t n_out) const;
  // The same matrix, copied once into matmul's packed layout (kernels/matmul.h)
  // when the dtype and CPU have a packed kernel; `pool` spreads the copy.
  StatusOr<PackedWeight> packed_matrix(const std::string& name, int64_t n_in, int64_t n_out,
                                       ThreadPool* pool) const;
  // A float32 vector of n elements (norm weights).
  StatusOr<const float*> vector_f32(const std::string& name, int64_t n) const;
  bool has(const std::string& name) const;

 private:
  StatusOr<const GgufTensor*> find(const std::string& name, std::vector<int64_t> shape) const;
  const GgufFile& file_;
};

// Reads every tensor's pages once so the model is resident before serving,
// reporting progress in bytes.
void touch_weights(const GgufFile& file, const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace omnibus
