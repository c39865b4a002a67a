// The 8-row interleaved ("packed") AVX2 matmul for Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K and Q6_K weights (internal to matmul.cc; layout in
// docs/quant-formats.md, "Packed weights").
//
// Rows are taken 8 at a time (a "group"; the last one padded with zero rows).
// In a group's block b, 32-bit lane r of each 256-bit quant register holds 4
// consecutive bytes of row r, so one broadcast 4-byte activation chunk meets
// 8 rows at once and maddubs leaves each row's products in its own lane: the
// exact int32 block sum of row r lands in lane r with no horizontal reduction.
// The fp16 scales of the 8 rows sit side by side, so the float work of a block
// is one vector op for 8 outputs.
//
// Per output y[t, r] the arithmetic is, over blocks b in order (acc = 0):
//   isum = exact int32 sum_k q_w[k] * q_a[k]
//   acc  = fma(d_w * d_a, float(isum), acc)
//   acc  = fma(m_w, s_a, acc)               (Q4_1, Q5_1 only)
// (K-quants: per 256-element super-block, isum with the sub-block scales
// applied in int32; Q4_K / Q5_K keep a second accumulator for the mins and
// give y = acc - mins), whatever the tile, thread, lane or n_tok: bitwise
// batch invariant, and equal to quant_avx2's vec_dot of the type.
//
// Calls with several token tiles run two groups of one matrix per kernel call
// where a thread's run of groups has them (each activation broadcast then
// feeds 16 rows), 4/5/6-bit quants split to bytes once per group; runs are short enough
// (~20 us) for a slower thread's tail to be taken over by the other.
//
// REQUIRES: cpu_features().use_avx2().
// Thread-safety: as matmul().
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul_act_avx2.h"
#include "kernels/matmul_grouped.h"

namespace omnibus::matmul_packed {

inline constexpr int kGroupRows = kMatmulGroupRows;

// The family's calls (matmul_grouped.h); has_kernel: Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K, Q6_K. Its matmul with packed == null packs each group on
// the fly into scratch.
extern const GroupedMatmulKernels kKernels;

// ys[m] = Ws[m] x for n_mats (<= 4) matrices of one type and n_in sharing the
// input x (in.x, or the gated activation of in.x and in.up): x is quantized
// once and all their groups form one parallel job. packed[m] as for matmul().
// Each ys[m] bitwise equal to matmul(*ws[m], x, ...).
// With out_act kSwiglu or kGeglu: the two matrices W_gate, W_up of a gated
// feed-forward block, and ys[0] = act(x W_gate, x W_up), bitwise ops.h's
// swiglu / geglu of the two products (ys[1] is not written): each tile call
// computes 16 rows of both and writes only their activation (the amx tier's
// gated quads). REQUIRES: gated_out_runs(*ws[0], *ws[1], packed[0],
// packed[1], n_tok).
void matmul_multi(const WeightView* const* ws, const uint8_t* const* packed, float* const* ys,
                  int n_mats, const matmul_act::TileInput& in, int64_t n_tok, ThreadPool& pool,
                  MatmulScratch& scratch, matmul_act::Gate out_act = matmul_act::Gate::kNone);

// Whether matmul_multi writes act(x W_gate, x W_up) in one pass (out_act) for
// n_tok tokens on the tier the CPU runs now: a type with the amx tier's gated
// kernel, both matrices packed at load, of one shape with whole pairs of
// groups (n_out a multiple of 16), and more than 8 tokens in each of its
// calls of up to 512 (the tile unit's calls; fewer tokens run the avx512
// kernels, and the activation is best made as the down projection quantizes).
bool gated_out_runs(const WeightView& gate, const WeightView& up, const uint8_t* packed_gate,
                    const uint8_t* packed_up, int64_t n_tok);

}  // namespace omnibus::matmul_packed
