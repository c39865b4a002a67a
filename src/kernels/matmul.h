// Batched matrix multiplication against a (usually quantized) weight matrix:
//
//   y[t, r] = sum_k W[r, k] * x[t, k]
//   W: [n_out, n_in] in dtype w.type (row r is dtype_row_size(type, n_in) bytes)
//   x: [n_tok, n_in] f32, y: [n_tok, n_out] f32 (row-major, row stride n_in / n_out)
//
// The activations are quantized once to the weight type's vec_dot_type, then
// each weight block is read once for a whole tile of tokens: a step with many
// tokens costs little more memory traffic than a step with one. This is what
// makes batching pay.
//
// Batch invariance (asserted by tests): y[t, r] is bitwise identical whatever
// n_tok is, whichever other rows of x share the call, and whichever thread or
// tile computed it — every output element uses one fixed reduction order.
//
// Packed weights: pack_weight() copies a weight matrix once (at model load)
// into an 8-row interleaved layout that the AVX2 kernels stream at close to
// memory bandwidth (docs/quant-formats.md, "Packed weights"). matmul on a
// PackedWeight gives bitwise the same y as matmul on its WeightView — the
// unpacked path packs row groups on the fly into scratch (quantized types) or
// reads the rows where they are (F32 / F16 / BF16, matmul_float_avx2.h) — so
// packing is purely a speed choice and may differ between two models of the
// same file.
//
// Thread-safety: the caller owns `scratch`; one matmul at a time per scratch.
// A PackedWeight is immutable after pack_weight and may be shared by threads.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "kernels/dtype.h"
#include "util/huge_page_allocator.h"

namespace omnibus {

class ThreadPool;

struct WeightView {
  DType type;
  const void* data;  // n_out rows of dtype_row_size(type, n_in) bytes
  int64_t n_in;      // columns (the reduced dimension)
  int64_t n_out;     // rows
};

// Reusable buffers so that matmul does not allocate once the engine is warm.
// (On huge pages from 2 MiB: a prompt's quantized activations are read a
// block at a time, kilobytes apart.)
using ScratchBytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;
struct MatmulScratch {
  ScratchBytes quantized_x;
  ScratchBytes packed_rows;    // per-thread row groups packed on the fly
  ScratchBytes unpacked_rows;  // per-thread Q4_1 groups with nibbles split
  ScratchBytes amx_rows;       // the amx tier's activations as 16-token rows
};

void matmul(const WeightView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// A weight matrix in the packed layout, owning its bytes (64-byte aligned,
// on transparent huge pages where the kernel gives them: see pack_weight).
// Types or CPUs without a packed kernel keep only the view (is_packed() false)
// and matmul falls back to the unpacked path. Move-only.
class PackedWeight {
 public:
  PackedWeight() = default;
  PackedWeight(PackedWeight&&) = default;
  PackedWeight& operator=(PackedWeight&&) = default;
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  const WeightView& view() const { return view_; }  // the original (not owned)
  bool is_packed() const { return data_ != nullptr; }
  const uint8_t* data() const { return data_.get(); }
  size_t size_bytes() const { return size_; }

 private:
  friend PackedWeight pack_weight(const WeightView& w, ThreadPool* pool);
  WeightView view_{};
  std::shared_ptr<uint8_t> data_;  // may share a huge-page chunk with other small matrices
  size_t size_ = 0;
};

// Packs w (its data must outlive the result only where !is_packed(), since
// the fallback reads it). `pool` (optional) spreads the copy over threads.
PackedWeight pack_weight(const WeightView& w, ThreadPool* pool = nullptr);

// The packed bytes of every PackedWeight alive in the process now, in no
// particular order: what a dense model's decode step streams, so that `bench
// --read-probe` can time the read probe's loops over those very pages
// (kernels/read_probe.h, read_spans) as well as over a buffer of its own. A
// snapshot: a span stays valid while its weight lives. Thread-safe.
std::vector<std::span<const uint8_t>> live_packed_weights();

// Same contract and bitwise the same result as matmul(w.view(), ...).
void matmul(const PackedWeight& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// y[m] = W[m] x for several weight matrices that share one input (q/k/v,
// gate/up): x is quantized once and, where the packed kernels apply (all of
// one type), all matrices' row groups form one parallel job. Each y[m] is
// bitwise what matmul(*w[m], x, n_tok, y[m], ...) gives.
// REQUIRES: w.size() == y.size() <= 4, every w[m] has the same n_in.
void matmul_shared_input(std::span<const PackedWeight* const> w, const float* x, int64_t n_tok,
                         std::span<float* const> y, ThreadPool& pool, MatmulScratch& scratch);

// The down projection of a gated feed-forward block: y = W act(gate, up), act
// ops.h's swiglu or geglu of [n_tok, n_in] rows. Where the packed kernels
// apply, the activation is computed a block at a time while the input is
// quantized (never written out and read back: at 64 tokens and n_in 8192 its
// rows are 2 MiB, more than L2); elsewhere into `gate`, then matmul. Either
// way y is bitwise what act(gate, up, gate) then matmul(w, gate, ...) gives;
// gate's contents afterwards are unspecified.
enum class GatedAct { kSwiglu, kGeglu };
void matmul_gated(const PackedWeight& w, GatedAct act, float* gate, const float* up, int64_t n_tok,
                  float* y, ThreadPool& pool, MatmulScratch& scratch);

// A gated feed-forward block's three matmuls: y = W_down act(x W_gate,
// x W_up), with gate, up [n_tok, n_ff] rows of scratch (their contents
// afterwards unspecified). Bitwise what matmul_shared_input({W_gate, W_up})
// then matmul_gated(W_down) give, which is what runs unless the tile unit
// runs the gate and up products (matmul_packed's gated_out_runs: the amx
// tier, a prompt's calls); there each call computes 16 rows of both and
// writes only act(gate, up) to `gate`, half the bytes written and read back
// by the down projection (which then quantizes it as it is).
void matmul_gated_ffn(const PackedWeight& w_gate, const PackedWeight& w_up,
                      const PackedWeight& w_down, GatedAct act, const float* x, int64_t n_tok,
                      float* gate, float* up, float* y, ThreadPool& pool, MatmulScratch& scratch);

// Scalar reference: quantizes x with the reference from_float of vec_dot_type
// and calls dtype_traits_ref().vec_dot for every (t, r). The definition of correct.
void matmul_ref(const WeightView& w, const float* x, int64_t n_tok, float* y);

}  // namespace omnibus
