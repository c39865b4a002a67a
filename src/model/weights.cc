#include "model/weights.h"

#include <functional>

#include "gguf/gguf_file.h"

namespace omnibus {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

bool WeightLoader::has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

StatusOr<const GgufTensor*> WeightLoader::find(const std::string& name,
                                               std::vector<int64_t> shape) const {
  const GgufTensor* t = file_.find_tensor(name);
  if (t == nullptr) return Status::corrupt("{}: missing tensor '{}'", file_.path(), name);
  if (t->shape != shape) {
    return Status::corrupt("{}: tensor '{}' has shape {}, expected {}", file_.path(), name,
                           shape_string(t->shape), shape_string(shape));
  }
  return t;
}

StatusOr<WeightView> WeightLoader::matrix(const std::string& name, int64_t n_in,
                                          int64_t n_out) const {
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, {n_in, n_out}));
  const DTypeTraits& traits = dtype_traits(t->type);
  if (traits.vec_dot == nullptr) {
    return Status::unsupported("{}: tensor '{}' has dtype {}, which omnibus cannot multiply",
                               file_.path(), name, traits.name);
  }
  if (n_in % traits.block_size != 0) {
    return Status::corrupt("{}: tensor '{}' row length {} is not a multiple of the {} block size {}",
                           file_.path(), name, n_in, traits.name, traits.block_size);
  }
  return WeightView{t->type, t->data, n_in, n_out};
}

StatusOr<PackedWeight> WeightLoader::packed_matrix(const std::string& name, int64_t n_in,
                                                  int64_t n_out, ThreadPool* pool) const {
  OMNIBUS_ASSIGN_OR_RETURN(const WeightView view, matrix(name, n_in, n_out));
  return pack_weight(view, pool);
}

StatusOr<const float*> WeightLoader::vector_f32(const std::string& name, int64_t n) const {
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, {n}));
  if (t->type != DType::F32) {
    return Status::unsupported("{}: tensor '{}' is {}, expected f32", file_.path(), name,
                               dtype_name(t->type));
  }
  return static_cast<const float*>(t->data);
}

void touch_weights(const GgufFile& file, const std::function<void(uint64_t, uint64_t)>& progress) {
  uint64_t total = 0;
  for (const GgufTensor& t : file.tensors()) total += t.n_bytes;
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  constexpr uint64_t kPage = 4096;
  for (const GgufTensor& t : file.tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    uint8_t acc = 0;
    for (uint64_t off = 0; off < t.n_bytes; off += kPage) acc ^= p[off];
    sink = sink ^ acc;
    done += t.n_bytes;
    if (progress) progress(done, total);
  }
  (void)sink;
}

}  // namespace omnibus
