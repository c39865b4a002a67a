#include "kernels/matmul.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/cpu_features.h"
#include "kernels/matmul_float_avx2.h"
#include "kernels/matmul_packed_avx2.h"
#include "kernels/ops_parallel.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

namespace omnibus {
namespace {

constexpr size_t kHugePage = HugePageAllocator<uint8_t>::kHugePage;

// n >= 2 MiB bytes (a multiple of 64), 2 MiB aligned, the whole 2 MiB pages
// of them on transparent huge pages (util/huge_page_allocator.h). The tail
// stays on 4 KiB pages, so touching it commits no more than it holds.
std::shared_ptr<uint8_t> alloc_huge(size_t n) {
  OMNIBUS_CHECK(n >= kHugePage);
  return std::shared_ptr<uint8_t>(HugePageAllocator<uint8_t>().allocate(n), [n](uint8_t* q) {
    HugePageAllocator<uint8_t>().deallocate(q, n);
  });
}

// The packed bytes of one matrix, 64-byte aligned, on huge pages. A decode
// step streams every weight once: on 4 KiB pages each 4 KiB of the stream is
// a TLB miss and a page walk, and the hardware prefetchers stop at each
// page's end (docs/performance.md: 10-35% of the streaming rate). Matrices
// of 2 MiB and more get their own allocation; smaller ones (a MoE model's
// experts, ~1 MiB each by the thousand) are carved from 32 MiB chunks, one
// being filled per thread (experts packed in parallel then fault in their
// own huge pages, each zeroed by the thread that writes it, instead of one
// thread zeroing a page the other waits for), each chunk freed with the last
// matrix in it. A chunk's pages are committed as they are first written.
// Thread-safety: callable from any thread (the chunk state is per thread).
std::shared_ptr<uint8_t> alloc_packed(size_t n) {
  n = (n + 63) / 64 * 64;
  if (n >= kHugePage) return alloc_huge(n);
  constexpr size_t kChunk = 16 * kHugePage;
  thread_local std::weak_ptr<uint8_t> chunk;  // this thread's chunk (alive while a matrix uses it)
  thread_local size_t used = 0;
  std::shared_ptr<uint8_t> c = chunk.lock();
  if (c == nullptr || used + n > kChunk) {
    c = alloc_huge(kChunk);
    chunk = c;
    used = 0;
  }
  std::shared_ptr<uint8_t> out(c, c.get() + used);  // shares the chunk's ownership
  used += n;
  return out;
}

// live_packed_weights' registry: each PackedWeight's bytes, from pack_weight
// to the weight's destruction.
struct PackedRegistry {
  std::mutex mu;
  std::map<const uint8_t*, size_t> spans;  // guarded by mu
};
PackedRegistry& packed_registry() {
  static PackedRegistry* r = new PackedRegistry;  // never destroyed: weights may outlive statics
  return *r;
}

// `raw` (n bytes) as a PackedWeight's data: registered until its last owner
// lets go, then unregistered and raw released (a small matrix's chunk lives
// on while other matrices use it).
std::shared_ptr<uint8_t> registered(std::shared_ptr<uint8_t> raw, size_t n) {
  uint8_t* p = raw.get();
  PackedRegistry& r = packed_registry();
  {
    const std::lock_guard<std::mutex> lock(r.mu);
    r.spans[p] = n;
  }
  return std::shared_ptr<uint8_t>(p, [raw = std::move(raw)](uint8_t* q) mutable {
    PackedRegistry& reg = packed_registry();
    {
      const std::lock_guard<std::mutex> lock(reg.mu);
      reg.spans.erase(q);
    }
    raw.reset();
  });
}

// Items per parallel task: a few tasks (4) per thread for balance, each of
// at least lo and at most hi items.
int64_t items_per_task(int64_t n, int64_t n_threads, int64_t lo, int64_t hi) {
  const int64_t tasks = n_threads * 4;
  return std::clamp<int64_t>((n + tasks - 1) / tasks, lo, hi);
}

// Any weight type (the fallback without AVX2, and Q2_K / Q3_K): quantize x
// once, then one vec_dot per output element.
// Batch invariant because every y[t, r] is the same vec_dot of the same rows.
void matmul_generic(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                    MatmulScratch& scratch) {
  const DTypeTraits& wt = dtype_traits(w.type);
  const DTypeTraits& at = dtype_traits(wt.vec_dot_type);
  OMNIBUS_CHECK(wt.vec_dot != nullptr && at.from_float != nullptr);
  const size_t w_row = dtype_row_size(w.type, w.n_in);
  const size_t a_row = dtype_row_size(at.type, w.n_in);
  if (scratch.quantized_x.size() < size_t(n_tok) * a_row)
    scratch.quantized_x.resize(size_t(n_tok) * a_row);
  uint8_t* qx = scratch.quantized_x.data();
  pool.parallel_for(n_tok,
                    [&](int64_t t, int) { at.from_float(x + t * w.n_in, qx + t * a_row, w.n_in); });

  const int64_t rows =
      items_per_task(w.n_out, pool.n_threads(), 16, std::numeric_limits<int64_t>::max());
  const int64_t n_tasks = (w.n_out + rows - 1) / rows;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(n_tasks, [&](int64_t task, int) {
    const int64_t r1 = std::min(w.n_out, (task + 1) * rows);
    for (int64_t r = task * rows; r < r1; ++r) {
      for (int64_t t = 0; t < n_tok; ++t) {
        y[t * w.n_out + r] = wt.vec_dot(w.n_in, wdata + r * w_row, qx + t * a_row);
      }
    }
  });
}

// The AVX2 family that reads w.type in 8-row groups (matmul_grouped.h), or
// null when this CPU or type has none.
const GroupedMatmulKernels* grouped_kernels(DType type) {
  if (!cpu_features().use_avx2()) return nullptr;
  if (matmul_packed::kKernels.has_kernel(type)) return &matmul_packed::kKernels;
  if (matmul_float::kKernels.has_kernel(type)) return &matmul_float::kKernels;
  return nullptr;
}

}  // namespace

void matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  OMNIBUS_CHECK(n_tok >= 0 && w.n_out >= 0);
  if (n_tok == 0 || w.n_out == 0) return;
  if (const GroupedMatmulKernels* k = grouped_kernels(w.type)) {
    k->matmul(w, nullptr, x, n_tok, y, pool, scratch);
    return;
  }
  matmul_generic(w, x, n_tok, y, pool, scratch);
}

PackedWeight pack_weight(const WeightView& w, ThreadPool* pool) {
  PackedWeight p;
  p.view_ = w;
  const GroupedMatmulKernels* k = grouped_kernels(w.type);
  if (k == nullptr || w.n_out == 0) return p;
  if (k == &matmul_packed::kKernels) OMNIBUS_CHECK(w.n_in % 32 == 0);
  const size_t gb = k->group_bytes(w.type, w.n_in);
  const int64_t n_groups = (w.n_out + kMatmulGroupRows - 1) / kMatmulGroupRows;
  p.size_ = size_t(n_groups) * gb;
  std::shared_ptr<uint8_t> raw = alloc_packed(p.size_);
  OMNIBUS_CHECK(raw != nullptr);
  p.data_ = registered(std::move(raw), p.size_);
  // Up to 64 groups a task, and at least 4 tasks a thread where the matrix
  // has the groups: an MoE expert's 96 groups as 64 + 32 left one thread
  // waiting for the other (and its page faults) through every expert.
  const int64_t per_task = items_per_task(n_groups, pool != nullptr ? pool->n_threads() : 1, 1, 64);
  const int64_t n_tasks = (n_groups + per_task - 1) / per_task;
  auto task = [&](int64_t i, int) {
    const int64_t g0 = i * per_task, g1 = std::min(n_groups, g0 + per_task);
    k->pack_groups(w, g0, g1, p.data_.get() + size_t(g0) * gb);
  };
  if (pool != nullptr) {
    pool->parallel_for(n_tasks, task);
  } else {
    for (int64_t i = 0; i < n_tasks; ++i) task(i, 0);
  }
  return p;
}

std::vector<std::span<const uint8_t>> live_packed_weights() {
  PackedRegistry& r = packed_registry();
  const std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::span<const uint8_t>> out;
  out.reserve(r.spans.size());
  for (const auto& [p, n] : r.spans) out.emplace_back(p, n);
  return out;
}

void matmul(const PackedWeight& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  if (!w.is_packed()) {
    matmul(w.view(), x, n_tok, y, pool, scratch);
    return;
  }
  OMNIBUS_CHECK(n_tok >= 0);
  if (n_tok == 0 || w.view().n_out == 0) return;
  grouped_kernels(w.view().type)->matmul(w.view(), w.data(), x, n_tok, y, pool, scratch);
}

void matmul_shared_input(std::span<const PackedWeight* const> w, const float* x, int64_t n_tok,
                         std::span<float* const> y, ThreadPool& pool, MatmulScratch& scratch) {
  constexpr size_t kMaxMats = 4;
  OMNIBUS_CHECK(w.size() == y.size() && !w.empty() && w.size() <= kMaxMats && n_tok >= 0);
  if (n_tok == 0) return;
  bool fused = true;
  for (const PackedWeight* p : w) {
    OMNIBUS_CHECK(p->view().n_in == w[0]->view().n_in);
    fused = fused && p->is_packed() && p->view().type == w[0]->view().type &&
            matmul_packed::kKernels.has_kernel(p->view().type);
  }
  if (!fused) {
    for (size_t m = 0; m < w.size(); ++m) matmul(*w[m], x, n_tok, y[m], pool, scratch);
    return;
  }
  const WeightView* views[kMaxMats];
  const uint8_t* data[kMaxMats];
  for (size_t m = 0; m < w.size(); ++m) {
    views[m] = &w[m]->view();
    data[m] = w[m]->data();
  }
  matmul_packed::matmul_multi(views, data, y.data(), int(w.size()), matmul_act::TileInput{x}, n_tok,
                              pool, scratch);
}

void matmul_gated(const PackedWeight& w, GatedAct act, float* gate, const float* up, int64_t n_tok,
                  float* y, ThreadPool& pool, MatmulScratch& scratch) {
  OMNIBUS_CHECK(n_tok >= 0);
  if (n_tok == 0) return;
  const int64_t n = w.view().n_in;
  if (w.is_packed() && matmul_packed::kKernels.has_kernel(w.view().type)) {
    const WeightView* views[1] = {&w.view()};
    const uint8_t* data[1] = {w.data()};
    const matmul_act::TileInput in{
        gate, up, act == GatedAct::kSwiglu ? matmul_act::Gate::kSwiglu : matmul_act::Gate::kGeglu};
    matmul_packed::matmul_multi(views, data, &y, 1, in, n_tok, pool, scratch);
    return;
  }
  if (act == GatedAct::kSwiglu) {
    swiglu(gate, up, gate, n_tok, n, pool);
  } else {
    geglu(gate, up, gate, n_tok, n, pool);
  }
  matmul(w, gate, n_tok, y, pool, scratch);
}

void matmul_gated_ffn(const PackedWeight& w_gate, const PackedWeight& w_up,
                      const PackedWeight& w_down, GatedAct act, const float* x, int64_t n_tok,
                      float* gate, float* up, float* y, ThreadPool& pool, MatmulScratch& scratch) {
  OMNIBUS_CHECK(n_tok >= 0);
  if (n_tok == 0) return;
  if (cpu_features().use_avx2() &&
      matmul_packed::gated_out_runs(w_gate.view(), w_up.view(), w_gate.data(), w_up.data(),
                                    n_tok)) {
    const WeightView* views[2] = {&w_gate.view(), &w_up.view()};
    const uint8_t* data[2] = {w_gate.data(), w_up.data()};
    float* ys[2] = {gate, up};
    matmul_packed::matmul_multi(
        views, data, ys, 2, matmul_act::TileInput{x}, n_tok, pool, scratch,
        act == GatedAct::kSwiglu ? matmul_act::Gate::kSwiglu : matmul_act::Gate::kGeglu);
    matmul(w_down, gate, n_tok, y, pool, scratch);
    return;
  }
  const PackedWeight* w[2] = {&w_gate, &w_up};
  float* ys[2] = {gate, up};
  matmul_shared_input(w, x, n_tok, ys, pool, scratch);
  matmul_gated(w_down, act, gate, up, n_tok, y, pool, scratch);
}

void matmul_ref(const WeightView& w, const float* x, int64_t n_tok, float* y) {
  const DTypeTraits& wt = dtype_traits_ref(w.type);
  const DTypeTraits& at = dtype_traits_ref(wt.vec_dot_type);
  OMNIBUS_CHECK(wt.vec_dot != nullptr && at.from_float != nullptr);
  const size_t w_row = dtype_row_size(w.type, w.n_in);
  std::vector<uint8_t> qx(dtype_row_size(at.type, w.n_in));
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  for (int64_t t = 0; t < n_tok; ++t) {
    at.from_float(x + t * w.n_in, qx.data(), w.n_in);
    for (int64_t r = 0; r < w.n_out; ++r) {
      y[t * w.n_out + r] = wt.vec_dot(w.n_in, wdata + r * w_row, qx.data());
    }
  }
}

}  // namespace omnibus
