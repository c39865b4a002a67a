#include "model/weights.h"

#include <algorithm>

#include "gguf/gguf_file.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Reads one byte of every page of [data, data + n) so that it is resident.
void touch_pages(const void* data, size_t n) {
  constexpr size_t kPage = 4096;
  const auto* p = static_cast<const volatile uint8_t*>(data);
  for (size_t off = 0; off < n; off += kPage) (void)p[off];
  if (n > 0) (void)p[n - 1];
}

// Rows [row_begin, row_begin + n_rows) of t, a tensor of GGUF shape `shape`
// (shape[0] = n_in; the other dimensions flattened into rows), in the file.
WeightView row_range(const GgufTensor& t, const std::vector<int64_t>& shape, int64_t row_begin,
                     int64_t n_rows) {
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
  OMNIBUS_CHECK(row_begin >= 0 && n_rows > 0 && row_begin + n_rows <= rows);
  const size_t row_bytes = dtype_row_size(t.type, shape[0]);
  return WeightView{t.type, static_cast<const uint8_t*>(t.data) + size_t(row_begin) * row_bytes,
                    shape[0], n_rows};
}

}  // namespace

WeightLoader::WeightLoader(const GgufFile& file, ProgressFn progress)
    : file_(file), progress_(std::move(progress)), counted_(file.tensors().size(), false) {
  for (const GgufTensor& t : file.tensors()) total_bytes_ += t.n_bytes;
}

bool WeightLoader::has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

std::vector<int64_t> WeightLoader::shape(const std::string& name) const {
  const GgufTensor* t = file_.find_tensor(name);
  return t != nullptr ? t->shape : std::vector<int64_t>{};
}

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

void WeightLoader::handled(const GgufTensor& t) {
  const size_t i = size_t(&t - file_.tensors().data());
  if (counted_[i]) return;
  counted_[i] = true;
  done_bytes_ += t.n_bytes;
  if (progress_) progress_(done_bytes_, total_bytes_);
}

void WeightLoader::done_with(const GgufTensor& t, bool packed) {
  if (packed) {
    file_.release_pages(t.data, t.n_bytes);  // matmul reads only the packed copy
    released_.push_back(&t);
  } else {
    touch_pages(t.data, t.n_bytes);
  }
  handled(t);
}

void WeightLoader::finish() {
  for (const GgufTensor* t : released_) file_.release_pages(t->data, t->n_bytes);
  if (progress_) progress_(total_bytes_, total_bytes_);
}

StatusOr<const GgufTensor*> WeightLoader::find_matrix(const std::string& name,
                                                      const std::vector<int64_t>& shape) const {
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, shape));
  const int64_t n_in = shape[0];
  const DTypeTraits& traits = dtype_traits(t->type);
  if (traits.vec_dot == nullptr) {
    return Status::unsupported("{}: tensor '{}' has dtype {}, which omnibus cannot multiply",
                               file_.path(), name, traits.name);
  }
  if (n_in % traits.block_size != 0) {
    return Status::corrupt(
        "{}: tensor '{}' row length {} is not a multiple of the {} block size {}", file_.path(),
        name, n_in, traits.name, traits.block_size);
  }
  return t;
}

StatusOr<WeightView> WeightLoader::matrix(const std::string& name, int64_t n_in, int64_t n_out) {
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find_matrix(name, {n_in, n_out}));
  handled(*t);
  return WeightView{t->type, t->data, n_in, n_out};
}

StatusOr<PackedWeight> WeightLoader::packed_matrix(const std::string& name, int64_t n_in,
                                                   int64_t n_out, ThreadPool* pool) {
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find_matrix(name, {n_in, n_out}));
  PackedWeight packed = pack_weight(WeightView{t->type, t->data, n_in, n_out}, pool);
  done_with(*t, packed.is_packed());
  return packed;
}

StatusOr<PackedWeight> WeightLoader::packed_rows(const std::string& name,
                                                 const std::vector<int64_t>& shape,
                                                 int64_t row_begin, int64_t n_rows,
                                                 ThreadPool* pool) {
  OMNIBUS_CHECK(!shape.empty());
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find_matrix(name, shape));
  const WeightView rows = row_range(*t, shape, row_begin, n_rows);
  PackedWeight packed = pack_weight(rows, pool);
  if (packed.is_packed()) {
    if (std::find(released_.begin(), released_.end(), t) == released_.end()) {
      released_.push_back(t);  // finish() releases the pages, after the last slice
    }
  } else {
    touch_pages(rows.data, size_t(n_rows) * dtype_row_size(t->type, shape[0]));
  }
  handled(*t);
  return packed;
}

StatusOr<std::vector<PackedWeight>> WeightLoader::packed_row_slices(
    const std::string& name, const std::vector<int64_t>& shape, int64_t rows_per_slice,
    ThreadPool* pool) {
  OMNIBUS_CHECK(!shape.empty() && rows_per_slice > 0);
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find_matrix(name, shape));
  const int64_t rows = t->n_elements / shape[0];          // find_matrix: t has this shape
  OMNIBUS_CHECK(rows > 0 && rows % rows_per_slice == 0);  // at least one slice
  const int64_t n_slices = rows / rows_per_slice;
  std::vector<PackedWeight> out(static_cast<size_t>(n_slices));
  auto pack = [&](int64_t i, int) {
    out[size_t(i)] = pack_weight(row_range(*t, shape, i * rows_per_slice, rows_per_slice), nullptr);
  };
  if (pool != nullptr) {
    pool->parallel_for(n_slices, pack);
  } else {
    for (int64_t i = 0; i < n_slices; ++i) pack(i, 0);
  }
  done_with(*t, out.front().is_packed());
  return out;
}

StatusOr<const float*> WeightLoader::vector_f32(const std::string& name, int64_t n) {
  OMNIBUS_ASSIGN_OR_RETURN(const GgufTensor* t, find(name, {n}));
  if (t->type != DType::F32) {
    return Status::unsupported("{}: tensor '{}' is {}, expected f32", file_.path(), name,
                               dtype_name(t->type));
  }
  const auto* data = static_cast<const float*>(t->data);
  vectors_->emplace_back(data, data + n);
  handled(*t);
  return vectors_->back().data();  // stable: the inner vector's buffer never moves
}

}  // namespace omnibus
