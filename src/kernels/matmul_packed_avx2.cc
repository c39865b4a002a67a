#include "kernels/matmul_packed_avx2.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul_packed_internal.h"
#include "kernels/matmul_packed_tuning.h"
#include "kernels/thread_pool.h"
#include "util/check.h"

// The per-type layouts and kernels live in matmul_packed_<type>_avx2.cc;
// this file packs, picks the kernels and splits the work over threads.
namespace omnibus::matmul_packed {
namespace internal {

GroupRows group_rows(const WeightView& w, int64_t g, size_t block_bytes, const uint8_t* zero) {
  const size_t w_row = dtype_row_size(w.type, w.n_in);
  const auto* base = static_cast<const uint8_t*>(w.data);
  GroupRows rows;
  for (int r = 0; r < kGroupRows; ++r) {
    const int64_t row = g * kGroupRows + r;
    const bool valid = row < w.n_out;
    rows.row[r] = valid ? base + size_t(row) * w_row : zero;
    rows.step[r] = valid ? block_bytes : 0;
  }
  return rows;
}

}  // namespace internal

namespace {

using internal::ActBlock32;
using internal::ActBlockK;
using internal::kTok;
using internal::kWideMaxTok;
using internal::Ops;

// One tier's kernel table for `type` (the tier's namespace in internal).
#define OMNIBUS_TIER_OPS(tier)                                  \
  switch (type) {                                               \
    case DType::Q4_0:                                           \
      return internal::tier::ops_q4_0();                        \
    case DType::Q4_1:                                           \
      return internal::tier::ops_q4_1();                        \
    case DType::Q5_0:                                           \
      return internal::tier::ops_q5_0();                        \
    case DType::Q5_1:                                           \
      return internal::tier::ops_q5_1();                        \
    case DType::Q8_0:                                           \
      return internal::tier::ops_q8_0();                        \
    case DType::Q4_K:                                           \
      return internal::tier::ops_q4_K();                        \
    case DType::Q5_K:                                           \
      return internal::tier::ops_q5_K();                        \
    case DType::Q6_K:                                           \
      return internal::tier::ops_q6_K();                        \
    default:                                                    \
      OMNIBUS_CHECK(false && "no packed kernel for this type"); \
      std::abort();                                             \
  }

// The kernels of the tier the CPU runs now (isa(): every tier packs the same
// layout and gives bitwise the same results, so the tier may differ between
// packing and use).
const Ops& ops_for(DType type) {
  switch (isa()) {
    case Isa::kAmx:
      if (type == DType::Q4_K) return internal::amx::ops_q4_K();
      if (type == DType::Q5_K) return internal::amx::ops_q5_K();
      if (type == DType::Q6_K) return internal::amx::ops_q6_K();
      OMNIBUS_TIER_OPS(avx512)
    case Isa::kAvx512:
      OMNIBUS_TIER_OPS(avx512)
    case Isa::kAvxVnni:
      OMNIBUS_TIER_OPS(avx_vnni)
    default:
      OMNIBUS_TIER_OPS(avx2)
  }
}
#undef OMNIBUS_TIER_OPS

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// `bytes` of `buf` from a 64-byte boundary (grown as needed, never shrunk).
uint8_t* aligned_scratch(ScratchBytes& buf, size_t bytes) {
  if (buf.size() < bytes + 64) buf.resize(bytes + 64);
  const auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + (round_up(addr, 64) - addr);
}

#ifndef OMNIBUS_UNPACKED_TOK
#define OMNIBUS_UNPACKED_TOK 8
#endif
// Tokens per call of a single-group unpacked kernel (<= 2 * kTok).
constexpr int kUnpackedTok = OMNIBUS_UNPACKED_TOK;

#ifndef OMNIBUS_MAX_PACKED_TILES
#define OMNIBUS_MAX_PACKED_TILES 2
#endif
// The most token tiles a call runs on packed groups (more: unpacked once),
// unless the type's Ops::packed_tiles says otherwise.
constexpr int64_t kMaxPackedTiles = OMNIBUS_MAX_PACKED_TILES;
#ifndef OMNIBUS_MAX_CALL_TOK
#define OMNIBUS_MAX_CALL_TOK 512
#endif
// The most tokens matmul_multi runs in one pass (more: calls of this many).
constexpr int64_t kMaxCallTok = OMNIBUS_MAX_CALL_TOK;
#ifndef OMNIBUS_MAX_SLICED_TOK
#define OMNIBUS_MAX_SLICED_TOK OMNIBUS_MAX_CALL_TOK
#endif
// The most tokens a call runs as slices of wide_pair calls (matmul_multi),
// per 64-token chunk: all of them. Against unpacking the group pair to bytes
// and running 4-token tiles over it, at 512 tokens (4096 x 14336, 2 threads,
// Zen 5 avx512, A B x2): Q4_K 55-61 -> 48.5-49.7 ms, Q4_0 -23%, Q4_1 -25%,
// Q8_0 -11%, Q6_K unchanged; nothing is written and read back per group.
constexpr int64_t kMaxSlicedTok = OMNIBUS_MAX_SLICED_TOK;

// Token tiles per chunk of a many-token call (matmul_multi's chunk loop says
// why), except on the tile unit (amx_chunk_tiles).
constexpr int64_t kChunkTiles = 16;
// The amx tier lays each group pair's operands out once per call, and a
// chunk is one call: as many tokens as kAmxChunkBytes of activation rows,
// in 32-token steps, at least kChunkTiles and at most kAmxCallTok. Each
// pair or quad of the run reads the chunk's rows once; past a core's L2
// they come from L3. 16 MiB makes every row up to n_in 28672 a whole
// 512-token call: against chunks kept in a 2 MiB L2 (1.5 MiB, the best
// of 0.75-1.5 in round (d), when pairs read the rows twice as often; 96
// tokens at n_in 14336, each call laying its super-blocks out again and
// re-reading the weights), Sapphire Rapids Xeon, 512 tokens, A B x2:
// Stream_Q4_K_14336x4096 +12% (2 threads) / +8-11% (1), Q6_K +19% /
// +17%, 4096 x 14336 (352 -> 512 tokens) +0-7%; 8B pp512 +4-6%
// (docs/performance.md, round (u)).
constexpr size_t kAmxChunkBytes = size_t(16) << 20;
constexpr int64_t kAmxTiles = 16 / kTok;  // token tiles per AmxActRows block
constexpr int64_t kAmxCallTiles = internal::kAmxCallTok / kTok;
int64_t amx_chunk_tiles(int64_t nb) {
  const size_t act16_block = size_t(nb) * sizeof(internal::AmxActRows);
  return std::clamp<int64_t>(int64_t(kAmxChunkBytes / act16_block) / 2 * 2 * kAmxTiles, kChunkTiles,
                             kAmxCallTiles);
}
// Where a tile-unit chunk has kAmxQuadMinTok tokens or more, four groups of
// a matrix packed at load (adjacent) take the quad kernel: each activation
// row it brings from L2 serves both its pairs. 4096 x 14336 and 14336 x
// 4096, 2 threads, Xeon, A B x3 against pairs: Q4_K 512 tokens (calls of 96
// and 352) 44.8-47.0 -> 40.5-43.6 and 54.7-55.6 -> 48.9-51.1 ms, Q6_K
// 41.3-49.5 -> 37.5-40.7 and 57.1-59.8 -> 48.0-50.5; at 64 tokens Q4_K 4-6%
// slower (a quad's operands, sums and accumulators overflow L1), Q6_K
// unchanged. The gated quads take the same rule (gated_out_runs).
constexpr int64_t kAmxQuadMinTok = 96;

}  // namespace

bool has_packed_kernel(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

size_t group_bytes(DType type, int64_t n_in) {
  const Ops& ops = ops_for(type);
  return round_up(ops.used_bytes(n_in / ops.block_elems), 64);
}

void pack_groups(const WeightView& w, int64_t g0, int64_t g1, uint8_t* out) {
  OMNIBUS_CHECK(has_packed_kernel(w.type));
  const Ops& ops = ops_for(w.type);
  OMNIBUS_CHECK(w.n_in % ops.block_elems == 0);
  const size_t gb = group_bytes(w.type, w.n_in);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = out + size_t(g - g0) * gb;
    ops.pack(w, g, dst);
    // zero the alignment padding so packed bytes are deterministic
    const size_t used = ops.used_bytes(w.n_in / ops.block_elems);
    std::memset(dst + used, 0, gb - used);
  }
}

void matmul(const WeightView& w, const uint8_t* packed, const float* x, int64_t n_tok, float* y,
            ThreadPool& pool, MatmulScratch& scratch) {
  const WeightView* ws[1] = {&w};
  const uint8_t* ps[1] = {packed};
  float* ys[1] = {y};
  matmul_multi(ws, ps, ys, 1, matmul_act::TileInput{x}, n_tok, pool, scratch);
}

bool gated_out_runs(const WeightView& gate, const WeightView& up, const uint8_t* packed_gate,
                    const uint8_t* packed_up, int64_t n_tok) {
  if (gate.type != up.type || gate.n_in != up.n_in || gate.n_out != up.n_out || gate.n_in == 0 ||
      gate.n_out % (2 * kGroupRows) != 0 || packed_gate == nullptr || packed_up == nullptr ||
      !has_packed_kernel(gate.type) || n_tok < 1)
    return false;
  const Ops& ops = ops_for(gate.type);
  // matmul_multi's tile-unit condition (unpack and amx_pair), and quads'
  // (every chunk kAmxQuadMinTok tokens or more: calls of one chunk each, the
  // last the shortest)
  const int64_t last_call = (n_tok - 1) % kMaxCallTok + 1;
  return ops.amx_gated != nullptr && ops.amx_pair != nullptr && ops.unpack != nullptr &&
         last_call > kMaxPackedTiles * kTok && last_call >= kAmxQuadMinTok &&
         amx_chunk_tiles(gate.n_in / ops.block_elems) * kTok >= kMaxCallTok;
}

void matmul_multi(const WeightView* const* ws, const uint8_t* const* packed, float* const* ys,
                  int n_mats, const matmul_act::TileInput& in, int64_t n_tok, ThreadPool& pool,
                  MatmulScratch& scratch, matmul_act::Gate out_act) {
  OMNIBUS_CHECK(n_mats >= 1 && n_tok >= 1);
  OMNIBUS_CHECK(in.gate == matmul_act::Gate::kNone || in.up != nullptr);
  const DType type = ws[0]->type;
  const int64_t n_in = ws[0]->n_in;
  constexpr int kMaxMats = 4;
  OMNIBUS_CHECK(n_mats <= kMaxMats);
  if (n_tok > kMaxCallTok) {
    // A step larger than kMaxCallTok tokens runs as calls of kMaxCallTok: each
    // of a call's tasks walks all of its activations, which then stream from
    // L3 / DRAM once per task instead of sitting in L2 (1B prompt at 8192
    // tokens a step: 450 prompt tok/s against 550 at 512). Each token's
    // outputs depend only on its own row: the same bits.
    for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxCallTok) {
      const size_t at = size_t(t0 * n_in);
      float* ys_block[kMaxMats];
      for (int m = 0; m < n_mats; ++m) ys_block[m] = ys[m] + size_t(t0 * ws[m]->n_out);
      const matmul_act::TileInput block{in.x + at, in.up == nullptr ? nullptr : in.up + at,
                                        in.gate};
      matmul_multi(ws, packed, ys_block, n_mats, block, std::min(kMaxCallTok, n_tok - t0), pool,
                   scratch, out_act);
    }
    return;
  }
  OMNIBUS_CHECK(has_packed_kernel(type));
  const bool gated = out_act != matmul_act::Gate::kNone;
  OMNIBUS_CHECK(!gated ||
                (n_mats == 2 && gated_out_runs(*ws[0], *ws[1], packed[0], packed[1], n_tok)));
  const Ops& ops = ops_for(type);
  OMNIBUS_CHECK(n_in % ops.block_elems == 0);
  // Group index space: matrix m's groups follow those of matrices 0..m-1.
  int64_t first_group[kMaxMats + 1] = {0};
  for (int m = 0; m < n_mats; ++m) {
    OMNIBUS_CHECK(ws[m]->type == type && ws[m]->n_in == n_in);
    first_group[m + 1] = first_group[m] + (ws[m]->n_out + kGroupRows - 1) / kGroupRows;
  }
  // (gated: the index space is W_gate's groups, each unit with W_up's same)
  const int64_t n_groups = first_group[gated ? 1 : n_mats];
  if (n_groups == 0) return;
  if (n_in == 0) {  // empty rows: every output an empty sum (no kernel sees nb = 0)
    for (int m = 0; m < n_mats; ++m) std::fill_n(ys[m], size_t(n_tok * ws[m]->n_out), 0.0f);
    return;
  }

  const int64_t nb = n_in / ops.block_elems;  // activation blocks per token
  const int64_t n_tiles = (n_tok + kTok - 1) / kTok;
  // 4/5/6-bit types with more than kMaxPackedTiles token tiles: each group's
  // quants are split to bytes once (per-thread buffer) and shared by all its
  // tiles. With fewer, each tile runs on the packed group (in L1/L2 after the
  // first tile): splitting would write and re-read 8 bytes per element that
  // a couple of tiles do not amortize.
  // Up to kMaxSlicedTok tokens of a type with wide kernels and no tile-unit
  // kernel: each group pair runs its tokens in slices of up to 4 kTok (2 kTok
  // where the type stops there; wide_pair) while it is in L1 / L2; nothing is
  // unpacked. Against unpacking, at 16 and
  // 64 tokens of 4096 x 14336 (Xeon, avx512 tier, 2 threads): Q4_K 4.6 ->
  // 2.8 and 12.7 -> 10.6 ms, Q6_K 6.2 -> 3.6 and 16.4 -> 14.4, Q8_0 (pairs
  // per tile before) 5.2 -> 3.5 and 14.7 -> 12.2; the amx tier's tile unit
  // is faster still from 9 tokens (Q4_K 2.0 ms at 16).
  // 2 kTok + 1 .. 4 kTok tokens of a type with a wide kernel for that count
  // and no tile unit (the avx512 tier's): one pass, as below. As
  // slices of 2 kTok and fewer, a 9-token step ran each group pair twice, and
  // Q6_K's 4- and 5-token passes cost 1.24-1.34x its 8-token pass (Zen 4,
  // 4096 x 14336, 2 threads): the 9th stream of a batch cost more than 1/8.
  const bool past_pair = n_tok > 2 * kTok && ops.amx_pair == nullptr;
  const bool long_pass = past_pair && n_tok <= kWideMaxTok && ops.wide_pair[n_tok] != nullptr;
  const bool sliced =
      past_pair && !long_pass && n_tok <= kMaxSlicedTok && ops.wide_pair[2 * kTok] != nullptr;
  const int64_t max_packed = ops.packed_tiles > 0 ? ops.packed_tiles : kMaxPackedTiles;
  const bool unpack = ops.unpack != nullptr && n_tiles > max_packed && !sliced && !long_pass;
  // 1..2 kTok tokens of a type with a wide kernel for that count (the avx512
  // tier's: every packed type): two groups x every token per pass, the quants
  // split once in registers (a verification step of 1 + k tokens). One token
  // takes it where one_token_pairs() (matmul_packed_tuning.cc says where and
  // why), else the single-group kernel.
  const bool wide = sliced || long_pass ||
                    (!unpack && n_tok <= 2 * kTok && ops.wide_pair[n_tok] != nullptr &&
                     (n_tok > 1 || one_token_pairs()));
  // A one-token call of a type with kernels for one token's ActBlock1 rows
  // (Ops::one on single groups, a run's lone last group included, and
  // Ops::one_pair on wide pairs) takes them (matmul_act_avx2.h says why).
  const bool row = n_tok == 1 && ops.one != nullptr && (!wide || ops.one_pair != nullptr);
  // Bytes per activation block of a tile (a tile is nb of them).
  const size_t act_block = row         ? sizeof(matmul_act::ActBlock1)
                           : ops.k_act ? sizeof(ActBlockK)
                                       : internal::act_block_bytes32(ops.with_qsum);
  const size_t act_bytes = size_t(n_tiles * nb) * act_block;
  if (scratch.quantized_x.size() < act_bytes) scratch.quantized_x.resize(act_bytes);
  uint8_t* act = scratch.quantized_x.data();
  // The activation tile `tile` (nb blocks).
  auto tile_act = [&](int64_t tile) -> const uint8_t* {
    return act + size_t(tile * nb) * act_block;
  };
  // The amx tier's many-token calls: every 16 tokens' Q8_K activations also
  // as rows (internal::AmxActRows, the tile unit's operand layout).
  const bool amx = unpack && ops.amx_pair != nullptr;
  OMNIBUS_CHECK(amx || !gated);
  const size_t act16_block = size_t(nb) * sizeof(internal::AmxActRows);
  internal::AmxActRows* act16 = nullptr;
  if (amx) {
    const size_t n_blocks = size_t((n_tiles + kAmxTiles - 1) / kAmxTiles);
    act16 = reinterpret_cast<internal::AmxActRows*>(
        aligned_scratch(scratch.amx_rows, n_blocks * act16_block));
  }
  // The input rows of token tile `tile`.
  auto tile_input = [&](int64_t tile) {
    const size_t at = size_t(tile * kTok * n_in);
    return matmul_act::TileInput{in.x + at, in.up == nullptr ? nullptr : in.up + at, in.gate};
  };
  pool.parallel_for(n_tiles, [&](int64_t tile, int) {
    const int64_t n_valid = std::min<int64_t>(kTok, n_tok - tile * kTok);
    uint8_t* a = act + size_t(tile * nb) * act_block;
    if (row) {
      matmul_act::quantize_row1(tile_input(tile), n_in, ops.with_sum, ops.with_qsum,
                                reinterpret_cast<matmul_act::ActBlock1*>(a));
    } else if (ops.k_act) {
      auto* blocks = reinterpret_cast<ActBlockK*>(a);
      matmul_act::quantize_tile_k(tile_input(tile), n_in, n_valid, blocks);
      if (amx) {
        // this tile's 4 rows of its 16-token block (the last tile also zeroes
        // the block's rows of tiles past the end: the tile unit reads them)
        internal::AmxActRows* rows = act16 + (tile / kAmxTiles) * nb;
        const int64_t q = tile % kAmxTiles;
        const int64_t q_end = tile == n_tiles - 1 ? kAmxTiles : q + 1;
        for (int64_t sb = 0; sb < nb; ++sb) {
          internal::AmxActRows& r = rows[sb];
          for (int64_t t = 0; t < kTok; ++t) {
            for (int c = 0; c < 4; ++c)
              std::memcpy(r.qs[c][q * kTok + t], blocks[sb].qs[t] + 64 * c, 64);
            r.d[q * kTok + t] = blocks[sb].d[t];
            std::memcpy(r.bsum_pairs[q * kTok + t], blocks[sb].bsum_pairs[t], 16);
          }
          for (int64_t t = (q + 1) * kTok; t < q_end * kTok; ++t) {
            for (int c = 0; c < 4; ++c) std::memset(r.qs[c][t], 0, 64);
            r.d[t] = 0.0f;
            std::memset(r.bsum_pairs[t], 0, 16);
          }
        }
      }
    } else {
      auto* blocks = reinterpret_cast<ActBlock32*>(a);
      int32_t* qsum = ops.with_qsum ? reinterpret_cast<int32_t*>(blocks + nb) : nullptr;
      matmul_act::quantize_tile(tile_input(tile), n_in, n_valid, ops.with_sum, blocks, qsum);
    }
  });

  const size_t gb = group_bytes(type, n_in);
  const int n_threads = pool.n_threads();
  bool any_unpacked = false;
  for (int m = 0; m < n_mats; ++m) any_unpacked |= packed[m] == nullptr;
  uint8_t* pack_buf = nullptr;
  if (any_unpacked) pack_buf = aligned_scratch(scratch.packed_rows, size_t(n_threads) * 2 * gb);
  const size_t ub = size_t(n_in) * kGroupRows;  // one byte per element of a group
  // Each thread's slot: two unpacked groups (the amx tier lays its operands
  // out per super-block in the call).
  const size_t unpack_slot = 2 * ub;
  uint8_t* unpack_buf = nullptr;
  if (unpack) unpack_buf = aligned_scratch(scratch.unpacked_rows, size_t(n_threads) * unpack_slot);
  static_assert(kUnpackedTok == kTok || kUnpackedTok == 2 * kTok);
  // The groups are cut into n_threads contiguous regions of n_sub runs
  // each; task t is run t / n_threads of region t % n_threads. Tasks are
  // claimed in order, so with threads at equal speed each one walks its own
  // region front to back: one prefetchable stream per thread, as a static
  // split, yet a descheduled (or slower) thread's runs are still taken by the
  // others. Runs are kept short (about kRunBlockTiles group-blocks x token
  // tiles, ~20 us, at least 4 per region) so that the last one, which nobody
  // can share, is short too. Which thread computes a group never changes its
  // result.
  const int64_t chunk_tiles = amx ? amx_chunk_tiles(nb) : kChunkTiles;
  constexpr int64_t kRunBlockTiles = 1536, kMinSubtasks = 4, kMaxSubtasks = 64;
  const int64_t n_regions = std::min<int64_t>(n_threads, n_groups);
  // (a gated unit's group is a group of each matrix: twice the work)
  const int64_t region_work = n_groups / n_regions * n_tiles * nb * (gated ? 2 : 1);
  const int64_t n_sub =
      std::clamp<int64_t>(region_work / kRunBlockTiles, kMinSubtasks, kMaxSubtasks);
  const int64_t n_tasks = n_regions * n_sub;
  pool.parallel_for(n_tasks, [&](int64_t task, int thread) {
    const int64_t region = task % n_regions, sub = task / n_regions;
    // Boundaries at even offsets, so that runs pair up their groups (at
    // multiples of 4 on the tile unit, which takes them four at a time; a
    // gated quad's are a pair of each matrix).
    const int64_t align = amx && !gated ? 4 : 2;
    auto cut = [align](int64_t lo, int64_t hi, int64_t i, int64_t n) {
      return i == n ? hi : lo + (hi - lo) * i / n / align * align;
    };
    const int64_t r0 = cut(0, n_groups, region, n_regions),
                  r1 = cut(0, n_groups, region + 1, n_regions);
    const int64_t g0 = cut(r0, r1, sub, n_sub), g1 = cut(r0, r1, sub + 1, n_sub);
    // Group gg of the index space: its matrix, and its packed bytes (packed
    // on the fly into this thread's pack slot `slot` where not packed at load).
    auto matrix_of = [&](int64_t gg) {
      int mm = 0;
      while (gg >= first_group[mm + 1]) ++mm;
      return mm;
    };
    auto group_ptr = [&](int m, int64_t g, int slot) -> const uint8_t* {
      if (packed[m] != nullptr) return packed[m] + size_t(g) * gb;
      uint8_t* buf = pack_buf + (size_t(thread) * 2 + size_t(slot)) * gb;
      ops.pack(*ws[m], g, buf);
      return buf;
    };
    // Token tiles in chunks of kChunkTiles (64 tokens): a prompt-sized call
    // walks its run of groups once per chunk, so the chunk's activations (up
    // to 123 KB at n_in 1536) stay in L2 instead of streaming the whole
    // batch's from L3 for every group pair. Unpacking is redone per chunk.
    for (int64_t c0 = 0, c1 = 0; c0 < n_tiles; c0 = c1) {
      c1 = std::min(n_tiles, c0 + chunk_tiles);
      // Slices take one whole tile or two: a last chunk of one (partial)
      // tile joins the one before (not every type has a 1-token wide kernel).
      if (sliced && n_tiles - c1 == 1) c1 = n_tiles;
      // The tile unit's calls of the chunk: up to kAmxCallTok tokens each,
      // call(first tile, its activation rows, tokens).
      auto amx_calls = [&](auto call) {
        OMNIBUS_CHECK(c0 % (2 * kAmxTiles) == 0);
        for (int64_t tile = c0; tile < c1; tile += kAmxCallTiles) {
          const int n_valid = int(
              std::min<int64_t>({internal::kAmxCallTok, n_tok - tile * kTok, (c1 - tile) * kTok}));
          OMNIBUS_CHECK(n_valid > 0 && n_valid <= internal::kAmxCallTok);
          call(tile, act16 + (tile / kAmxTiles) * nb, n_valid);
        }
      };
      for (int64_t gg = g0; gg < g1;) {
        if (gated) {
          // W_gate's groups gg, gg + 1 and W_up's same two, the quad's
          // activation written in place of both (every call tile-unit sized:
          // gated_out_runs)
          const int64_t n_out = ws[0]->n_out;
          const uint8_t* gate0 = packed[0] + size_t(gg) * gb;
          const uint8_t* up0 = packed[1] + size_t(gg) * gb;
          amx_calls([&](int64_t tile, const internal::AmxActRows* rows, int n_valid) {
            ops.amx_gated(gate0, up0, gb, nb, rows, act16_block, n_valid,
                          ys[0] + gg * kGroupRows + tile * kTok * n_out, n_out, out_act);
          });
          gg += 2;
          continue;
        }
        const int m = matrix_of(gg);
        const WeightView& w = *ws[m];
        const int64_t g = gg - first_group[m];
        float* y = ys[m] + g * kGroupRows;
        const uint8_t* gp = group_ptr(m, g, 0);
        const int n_rows = int(std::min<int64_t>(kGroupRows, w.n_out - g * kGroupRows));
        if (wide && gg + 1 < g1 && gg + 1 < first_group[m + 1]) {
          // Two groups x all the call's tokens in one pass, or in slices (the
          // kernel prefetches on into the next pair: no burst here).
          const uint8_t* gp1 = group_ptr(m, g + 1, 1);
          OMNIBUS_CHECK(gp1 == gp + gb);  // packed at load or in this thread's two slots
          const int n_rows1 = int(std::min<int64_t>(kGroupRows, w.n_out - (g + 1) * kGroupRows));
          if (row) {
            ops.one_pair(gp, gp1, nb, act, act, y, w.n_out, n_rows1);
          } else if (!sliced) {
            ops.wide_pair[n_tok](gp, gp1, nb, tile_act(0),
                                 tile_act(std::min<int64_t>(1, n_tiles - 1)), y, w.n_out, n_rows1);
          } else {
            // A slice of tiles [tile, tile + n): its tokens in one pass.
            auto slice = [&](int64_t tile, int64_t n) {
              const int T = int(std::min<int64_t>(n * kTok, n_tok - tile * kTok));
              OMNIBUS_CHECK(T >= 1 && T <= kWideMaxTok && ops.wide_pair[T] != nullptr);
              ops.wide_pair[T](gp, gp1, nb, tile_act(tile), tile_act(tile + (n > 1 ? 1 : 0)),
                               y + tile * kTok * w.n_out, w.n_out, n_rows1);
            };
            OMNIBUS_CHECK(c1 - c0 >= 2);
            if (ops.wide_pair[kWideMaxTok] != nullptr) {
              // Every count from kTok + 1 to 4 kTok: slices of four tiles,
              // the last of two or three (a partial last tile among them; a
              // lone tile after fours takes three of the last four: 3 + 2).
              int64_t fours = (c1 - c0) / 4;
              const int64_t rest = (c1 - c0) % 4;
              if (rest == 1) --fours;  // (c1 - c0 >= 2: fours >= 1 here)
              for (int64_t q = 0; q < fours; ++q) slice(c0 + 4 * q, 4);
              const int64_t c0r = c0 + 4 * fours;
              if (rest == 1) {
                slice(c0r, 3);
                slice(c0r + 3, 2);
              } else if (rest > 0) {
                slice(c0r, rest);
              }
            } else {
              // Slices of two tiles; with an odd count the first is one
              // (whole: 2 tiles or more are left): every slice has kTok + 1
              // .. 2 kTok tokens, or kTok.
              const int64_t first = c0 + (c1 - c0) % 2;
              if (first != c0) slice(c0, 1);
              for (int64_t tile = first; tile < c1; tile += 2) slice(tile, 2);
            }
          }
          gg += 2;
          continue;
        }
        if (!unpack && n_tiles > 1 && ops.pair[1] != nullptr && gg + 1 < g1 &&
            gg + 1 < first_group[m + 1]) {
          // Many tiles of a type with a pair kernel: two groups per call.
          const uint8_t* gp1 = group_ptr(m, g + 1, 1);
          const int n_rows1 = int(std::min<int64_t>(kGroupRows, w.n_out - (g + 1) * kGroupRows));
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.pair[T](gp, gp1, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out, n_rows1);
          }
          gg += 2;
          continue;
        }
        if (row) {
          ops.one(gp, nb, act, y, w.n_out, n_rows);
          ++gg;
          continue;
        }
        if (!unpack) {
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.kernel[T](gp, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out, n_rows);
          }
          ++gg;
          continue;
        }
        // Many tiles: split the nibbles once per group, and run two groups of
        // one matrix together where the run has them.
        const bool pair = gg + 1 < g1 && gg + 1 < first_group[m + 1];
        if (amx && pair) {
          // The tile unit: the pair's operands once, then up to kAmxCallTok
          // tokens of the chunk a call. The kernel prefetches each
          // super-block's bytes a distance ahead, on into the next pair (a
          // burst of the whole next pair here, 38 KB of Q4_K, held up the
          // loads behind it: -4 to -28% time a call at 16-512 tokens, Xeon).
          // Quads where the chunk has kAmxQuadMinTok tokens.
          const bool quad = ops.amx_quad != nullptr && packed[m] != nullptr && gg + 3 < g1 &&
                            gg + 3 < first_group[m + 1] &&
                            std::min(n_tok - c0 * kTok, (c1 - c0) * kTok) >= kAmxQuadMinTok;
          const int gn = quad ? 4 : 2;
          const uint8_t* gp1 = group_ptr(m, g + 1, 1);
          const int n_rows_last =
              int(std::min<int64_t>(kGroupRows, w.n_out - (g + gn - 1) * kGroupRows));
          amx_calls([&](int64_t tile, const internal::AmxActRows* rows, int n_valid) {
            float* yt = y + tile * kTok * w.n_out;
            if (quad) {
              ops.amx_quad(gp, gb, nb, rows, act16_block, n_valid, yt, w.n_out, n_rows_last);
            } else {
              ops.amx_pair(gp, gp1, nb, rows, act16_block, n_valid, yt, w.n_out, n_rows_last);
            }
          });
          gg += gn;
          continue;
        }
        const int step = pair ? 2 : 1;
        uint8_t* ubuf = unpack_buf + size_t(thread) * unpack_slot;
        const bool single_unpacked = ops.unpacked_single[1] != nullptr;
        if (pair || single_unpacked) ops.unpack(gp, nb, ubuf);
        const uint8_t* gp1 = nullptr;
        if (pair) {
          gp1 = group_ptr(m, g + 1, 1);
          ops.unpack(gp1, nb, ubuf + ub);
        }
        // No burst of the next groups into L2 here: 74301ef's (a whole group
        // a call) was deleted by GCC 12 as a side-effect-free call (see
        // matmul_packed_prefetch.h) and never ran; emitted (always_inline),
        // it changed nothing at 16-512 tokens on a Sapphire Rapids Xeon
        // (avx2, avx512 and amx tiers, Q4_K / Q6_K / Q4_0 / Q4_1 / Q8_0,
        // 2 threads): these calls are bound by arithmetic, not the stream.
        if (pair) {
          const int n_rows1 = int(std::min<int64_t>(kGroupRows, w.n_out - (g + 1) * kGroupRows));
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.upair[T](ubuf, ubuf + ub, gp, gp1, nb, tile_act(tile), y + tile * kTok * w.n_out,
                         w.n_out, n_rows1);
          }
        } else if (!single_unpacked) {
          for (int64_t tile = c0; tile < c1; ++tile) {
            const int T = int(std::min<int64_t>(kTok, n_tok - tile * kTok));
            ops.kernel[T](gp, nb, tile_act(tile), y + tile * kTok * w.n_out, w.n_out, n_rows);
          }
        } else {
          constexpr int64_t tiles_per_call = kUnpackedTok / kTok;
          for (int64_t tile = c0; tile < c1; tile += tiles_per_call) {
            const int T =
                int(std::min<int64_t>({kUnpackedTok, n_tok - tile * kTok, (c1 - tile) * kTok}));
            const uint8_t* a0 = tile_act(tile);
            const uint8_t* a1 = T > kTok ? tile_act(tile + 1) : a0;
            ops.unpacked_single[T](ubuf, gp, nb, a0, a1, y + tile * kTok * w.n_out, w.n_out,
                                   n_rows);
          }
        }
        gg += step;
      }
    }
  });
}

const GroupedMatmulKernels kKernels{has_packed_kernel, group_bytes, pack_groups, matmul};

}  // namespace omnibus::matmul_packed
