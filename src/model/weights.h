// WeightLoader: finds and checks weight tensors by name and shape while a
// model loads, and decides where each one lives afterwards:
//
//   packed_matrix()  matmul weights. Where the dtype and CPU have a packed
//                    kernel (kernels/matmul.h) the tensor is copied once into
//                    the packed layout on the heap and its file pages are then
//                    released (GgufFile::release_pages): its bytes are resident
//                    once, on the heap. Otherwise matmul reads the mapping, and
//                    the tensor's pages are touched so the first step does not
//                    fault.
//   vector_f32()     norm weights: copied to the heap (owned_vectors(), which
//                    the model keeps), so that no forward step reads the
//                    mapping near released pages: kernels that map a whole
//                    large folio on a fault (Linux >= 6.10 with large folios
//                    on ext4) would otherwise bring a released neighbour's
//                    2 MiB back into the resident set with each tiny read.
//   matrix()         a view into the mapping that is neither packed nor
//                    touched: for tensors read in parts (the embedding rows a
//                    step gathers), whose pages fault in as they are read.
//
// So after loading, resident weight memory is about one model size: the
// packed copies plus the small mapped tensors (and the embedding rows read so
// far). Progress is reported in bytes of the tensors handled so far, out of
// all the file's tensor bytes; finish() reports the end.
//
// Thread-safety: used by one thread, only during loading.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "util/status.h"

namespace omnibus {

class GgufFile;
struct GgufTensor;

class WeightLoader {
 public:
  using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;
  explicit WeightLoader(const GgufFile& file, ProgressFn progress = {});

  // A matrix whose GGUF shape is [n_in, n_out] (ggml order), usable by matmul;
  // stays in the mapping, untouched (see above).
  StatusOr<WeightView> matrix(const std::string& name, int64_t n_in, int64_t n_out);
  // The same matrix in matmul's packed layout when the dtype and CPU have a
  // packed kernel (its file pages then released), else the mapped view with
  // its pages touched. `pool` spreads the copy.
  StatusOr<PackedWeight> packed_matrix(const std::string& name, int64_t n_in, int64_t n_out,
                                       ThreadPool* pool);
  // Rows [row_begin, row_begin + n_rows) of a tensor of GGUF shape `shape`
  // (shape[0] = n_in; the other dimensions flattened into rows), packed like
  // packed_matrix(): Q, K or V of a fused [n_in, n_q + 2 n_kv] projection,
  // or one expert of a 3-D expert tensor [n_in, n_out, n_expert] (all of
  // them: packed_row_slices). A packed tensor's
  // file pages are released by finish(), once all its slices are packed.
  StatusOr<PackedWeight> packed_rows(const std::string& name, const std::vector<int64_t>& shape,
                                     int64_t row_begin, int64_t n_rows, ThreadPool* pool);
  // Every slice of rows_per_slice rows of such a tensor, in order, each
  // packed as packed_rows() packs it: the experts of a 3-D expert tensor.
  // The slices are packed in parallel, one a task: an expert's matrix (~1
  // MiB) split over the threads had both of them fault the same fresh huge
  // pages, one zeroing while the other waited. A packed tensor's file pages
  // are released as soon as its last slice is packed.
  StatusOr<std::vector<PackedWeight>> packed_row_slices(const std::string& name,
                                                        const std::vector<int64_t>& shape,
                                                        int64_t rows_per_slice, ThreadPool* pool);
  // A float32 vector of n elements (norm weights), as a heap copy that lives
  // as long as owned_vectors() does.
  StatusOr<const float*> vector_f32(const std::string& name, int64_t n);
  // The heap copies vector_f32 returned: the model must keep them.
  std::shared_ptr<const void> owned_vectors() const { return vectors_; }
  bool has(const std::string& name) const;
  // The tensor's GGUF shape (ggml order), or empty when it is missing.
  std::vector<int64_t> shape(const std::string& name) const;

  // Releases the file pages of every packed tensor once more (reads of small
  // tensors during loading may have mapped them again) and reports progress
  // as complete (tensors the model does not use included).
  void finish();

 private:
  StatusOr<const GgufTensor*> find(const std::string& name, std::vector<int64_t> shape) const;
  // find() plus the checks matmul needs (a dot product, whole blocks per row);
  // shape[0] is the row length, the other dimensions count rows.
  StatusOr<const GgufTensor*> find_matrix(const std::string& name,
                                          const std::vector<int64_t>& shape) const;
  // Counts t's bytes towards progress, once per tensor.
  void handled(const GgufTensor& t);
  // After the whole of t is packed (packed) or left in the mapping: releases
  // its file pages or touches them, and counts it as handled.
  void done_with(const GgufTensor& t, bool packed);

  const GgufFile& file_;
  ProgressFn progress_;
  uint64_t total_bytes_ = 0;
  uint64_t done_bytes_ = 0;
  std::vector<bool> counted_;                // [n_tensors] bytes already counted
  std::vector<const GgufTensor*> released_;  // packed: their pages are not read again
  std::shared_ptr<std::vector<std::vector<float>>> vectors_ =
      std::make_shared<std::vector<std::vector<float>>>();
};

}  // namespace omnibus
