// The amx tier's Q4_K, Q5_K and Q6_K kernels for many tokens: two packed groups
// (16 rows; amx_pair) or four (32 rows; amx_quad) x up to kAmxCallTok tokens
// per call on the tile unit (AMX-INT8's tdpbsud / tdpbssd: signed activation
// bytes times unsigned / signed weight bytes, 16 x 16 int32 sums of 64-byte
// rows).
//
// A Q4_K / Q5_K super-block's result needs, per output and token,
//   isum = sum_j sc_j * sum_{k in sub-block j} q[k] * a[k]   (exact int32)
// with a 6-bit scale sc_j per 32-element sub-block: the tile unit cannot
// scale its 64-element rows per 32 elements, and q * sc (<= 1953) is no
// byte. But sc = 8 sh + sl with sh, sl in [0, 7], and q * sh, q * sl <= 217
// (q <= 31) are bytes, so the super-block's isum is two plain dot products:
//   isum = 8 * sum_k (q[k] sh_j(k)) a[k] + sum_k (q[k] sl_j(k)) a[k]
// (an integer identity: the same int32 as every other tier's). Q6_K's split
// is into the bytes of each weight's whole product (below). A call lays each
// super-block's two byte matrices out once (into an L1 buffer) and runs all
// its tokens on them, 32 at a time: 8 tile products of K = 64 per super-block
// and 32 tokens (a quad: both pairs' operands, and each 32 tokens through
// one pair then the other). Each super-block's bytes are prefetched a
// distance ahead, on into the next pair or quad (SpreadPrefetch in
// matmul_packed_prefetch.h, a few lines per tile step, and per step of Q6_K's
// layout; measurements there): the stream is the run's
// groups, in order. The distance is the other kernels'
// rule (prefetch_far: kPrefetchFar into L2 for rows of 2048 and more, else
// kPrefetchNear into L1); into L1 at every width, as until round (r), the
// prefetch instruction itself collected ~11% of the Q4_K calls' samples at
// 64 tokens (its line fill buffers full), and far measured on a Sapphire
// Rapids Xeon (kernels_microbench Stream_(Q4_K|Q6_K), 2 threads, A B x2):
// 16 tokens +3-9%, 64 tokens +2-7% (one of six shapes mixed), 512 tokens
// unchanged; the 1B shape's 64-sequence generation 371-388 -> 394-399 tok/s
// (A B x3), its pp512 unchanged (docs/performance.md, round (r)). The float
// steps after them are the avx512 tier's, in its order (acc, mins per
// super-block; super-block 0 starts from zero): bitwise equal to every tier
// (kernels/matmul_test.cc, IsaTiersAreBitwiseEqual, ManyTokenKQuants...).
//
// Thread-safety: stateless; each call configures the calling thread's tiles
// and releases them before it returns.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

// GCC 12's _mm512_cvtph_ps passes an _mm512_undefined_ps() vector that its
// -Wuninitialized flags where inlined here (GCC PR 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/matmul_packed_internal.h"
#include "kernels/ops_vec_avx512.h"
#include "kernels/quant_blocks.h"

#if !(defined(__AMX_INT8__) || defined(__AMXINT8__)) || \
    !(defined(__AMX_TILE__) || defined(__AMXTILE__))
#error "compiled with the amx tier's flags only (CMakeLists.txt)"
#endif

namespace omnibus::matmul_packed::internal::amx {
namespace {

// Per super-block of a pair: for c in 0..3 (64 elements each), the sh-scaled
// operand then the sl-scaled one, each 16 rows (k4: elements 64c + 4 k4 ..
// + 3) x 64 bytes (output n's 4 bytes at 4n; group 0's rows n 0-7).
constexpr size_t kTileBytes = 1024;
constexpr size_t kSuperBytes = 4 * 2 * kTileBytes;

// Tile registers: C 0-3 (token block 0's sh and sl sums, then block 1's),
// A 4-5 (the blocks' activation rows), B 6-7 (sh, sl); all 16 x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

// Configures the calling thread's tiles for one call (released at its end).
inline void load_tile_config() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

// A pair's step i of sub-block j: its quants one per byte, elements 4i..4i+3
// (lo) and 16+4i..16+4i+3 (hi) of the sub-block (matmul_packed_internal.h's
// Q4_1 / Q5_0 layouts), group 0's rows in the low half.
template <class L>
inline void load_pair_step(const uint8_t* group0, const uint8_t* group1, int64_t sb, int j, int i,
                           __m512i* lo, __m512i* hi) {
  if constexpr (L::kFifth) {
    pair_step_5bit(group0 + L::qs(sb, j), load256(group0 + L::hb(sb, j)), group1 + L::qs(sb, j),
                   load256(group1 + L::hb(sb, j)), i, lo, hi);
  } else {
    pair_step_4bit(group0 + L::qs(sb, j), group1 + L::qs(sb, j), i, lo, hi);
  }
}

// Q4_K (q <= 15) and Q5_K (q <= 31): q * sh and q * sl <= 217 are unsigned
// bytes either way.
template <class L>
[[gnu::always_inline]] inline void unpack_super(const uint8_t* group0, const uint8_t* group1,
                                                int64_t sb, uint8_t* o) {
  for (int j = 0; j < 8; ++j) {
    // sub-block j's scales, one per output in both bytes of its 16-bit
    // lanes (output n: lanes 2n, 2n+1, its 4 bytes): q * s <= 217, so one
    // 16-bit multiply scales both bytes without a carry between them
    int64_t sc0, sc1;
    std::memcpy(&sc0, group0 + L::sc(sb, j), 8);
    std::memcpy(&sc1, group1 + L::sc(sb, j), 8);
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_set_epi64x(sc1, sc0));
    const __m512i sh = _mm512_srli_epi32(sc, 3), sl = _mm512_and_si512(sc, _mm512_set1_epi32(7));
    const __m512i sh16 = _mm512_or_si512(sh, _mm512_slli_epi32(sh, 16));
    const __m512i sl16 = _mm512_or_si512(sl, _mm512_slli_epi32(sl, 16));
    uint8_t* th = o + size_t(j / 2) * 2 * kTileBytes;  // tile c = j / 2
    uint8_t* tl = th + kTileBytes;
    const size_t row0 = size_t(j % 2) * 8;  // sub-block's first row (k4) in the tile
    for (int i = 0; i < 4; ++i) {
      __m512i lo, hi;
      load_pair_step<L>(group0, group1, sb, j, i, &lo, &hi);
      _mm512_store_si512(th + (row0 + i) * 64, _mm512_mullo_epi16(lo, sh16));
      _mm512_store_si512(tl + (row0 + i) * 64, _mm512_mullo_epi16(lo, sl16));
      _mm512_store_si512(th + (row0 + 4 + i) * 64, _mm512_mullo_epi16(hi, sh16));
      _mm512_store_si512(tl + (row0 + 4 + i) * 64, _mm512_mullo_epi16(hi, sl16));
    }
  }
}

// Tokens per tile block (the tile unit's 16 rows), and per unit: two blocks
// share each weight operand.
constexpr int kBlockTok = 16, kUnitTok = 2 * kBlockTok;

// One unit of a call: up to 32 tokens (from t0) of one super-block of one of
// the call's pairs.
struct Unit {
  const AmxActRows* a0;  // the super-block's rows of the unit's two blocks
  const AmxActRows* a1;  // (a1 only where n > 16)
  int t0, n;
  int pair;  // the call's pair (0 for a pair's call, 0 or 1 for a quad's)
};

// Rows [r0, r1) of part `part` (of 4) of a unit's block: a two-block unit
// takes two parts per block, a one-block unit four. Returns the block.
inline int part_rows(const Unit& unit, int part, int* r0, int* r1) {
  const bool two = unit.n > kBlockTok;
  const int blk = two ? part / 2 : 0;
  const int rows = std::min(kBlockTok, unit.n - blk * kBlockTok);
  const int per = two ? (rows + 1) / 2 : (rows + 3) / 4;
  *r0 = std::min(rows, (two ? part % 2 : part) * per);
  *r1 = std::min(rows, *r0 + per);
  return blk;
}

// A unit's int32 sums of one super-block: [token block][first, second
// operand][token][output].
using UnitSums = int32_t[2][2][kBlockTok][16];

// A unit's tile products on a super-block's operands b ([c][first, second]
// [16 rows k4][64 bytes]: elements 64c.. of 16 outputs): 4 tile steps, each
// both operands times the unit's one or two blocks of activation rows, then
// hook(step). The first operand's bytes are unsigned (tdpbsud); the second's
// are signed where kSecondSigned (tdpbssd: Q6_K's high bytes).
template <bool kSecondSigned, class Hook>
inline void unit_products(const uint8_t* b, const Unit& unit, UnitSums& c, Hook hook) {
  const bool two = unit.n > kBlockTok;
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int k = 0; k < 4; ++k) {
    _tile_loadd(6, b + size_t(k) * 2 * kTileBytes, 64);
    _tile_loadd(7, b + size_t(k) * 2 * kTileBytes + kTileBytes, 64);
    _tile_loadd(4, unit.a0->qs[k][0], 64);
    _tile_dpbsud(0, 4, 6);
    if constexpr (kSecondSigned) {
      _tile_dpbssd(1, 4, 7);
    } else {
      _tile_dpbsud(1, 4, 7);
    }
    if (two) {
      _tile_loadd(5, unit.a1->qs[k][0], 64);
      _tile_dpbsud(2, 5, 6);
      if constexpr (kSecondSigned) {
        _tile_dpbssd(3, 5, 7);
      } else {
        _tile_dpbsud(3, 5, 7);
      }
    }
    hook(k);
  }
  _tile_stored(0, c[0][0], 64);
  _tile_stored(1, c[0][1], 64);
  if (two) {
    _tile_stored(2, c[1][0], 64);
    _tile_stored(3, c[1][1], 64);
  }
}

// Runs a call as units: super-block outer, so that a super-block's weight
// operands, laid out once (Kern::prepare, into the L1 buffer Kern::b: one
// kSuperBytes per pair), serve all the call's tokens; its token units inner,
// and for each, the call's pairs (Kern::kPairs: 1, or 2 for a quad of
// groups) one after the other. The activation rows come from L2 or L3 (a
// call's tokens x the row: up to 16 MiB, matmul_packed_avx2.cc's
// kAmxChunkBytes), so a quad's second pair finds its unit's rows in L1:
// half the L2 traffic per product (4096 x 14336 Q4_K, 1 thread,
// every unit's rows read from L1 instead, values wrong, timing only: a
// 512-token call took 27% less time, a 64-token one 20% less). unit_products
// issues a unit's tile products, calling hook(part) for parts 0..3 between
// its tile steps; the hook runs part `part` of the previous unit's float
// steps (Kern::finish), so that the vector units work while the tile unit
// does, and the out-of-order window always holds both. A token's
// super-blocks are finished in ascending order, as every tier accumulates
// them.
template <class Kern>
void run_call(Kern& kern, int64_t nsb, const AmxActRows* act16, size_t act16_block, int n_valid) {
  // 0 < n_valid <= kAmxCallTok: the driver checks it (no out-of-line code
  // of another namespace may be compiled here: check_tier_symbols.sh)
  load_tile_config();
  alignas(64) UnitSums sums[2];
  typename Kern::Fin fin[2];
  Unit units[2];
  const int n_units = (n_valid + kUnitTok - 1) / kUnitTok;
  auto rows = [&](int blk, int64_t sb) {
    return reinterpret_cast<const AmxActRows*>(reinterpret_cast<const uint8_t*>(act16) +
                                               size_t(blk) * act16_block) +
           sb;
  };
  // the super-block's prefetch lines per step (of its layout and of its tile products)
  const int pf_steps = Kern::kLayoutSteps + 4 * n_units * Kern::kPairs;
  const int pf_per_step = (Kern::Prefetch::kLines + pf_steps - 1) / pf_steps;
  int64_t u = 0;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const typename Kern::Fin f = kern.prepare(sb, pf_per_step);
    for (int iu = 0; iu < n_units; ++iu) {
      const int t0 = iu * kUnitTok, n = std::min(kUnitTok, n_valid - t0);
      for (int p = 0; p < Kern::kPairs; ++p) {
        const Unit unit{rows(2 * iu, sb), n > kBlockTok ? rows(2 * iu + 1, sb) : nullptr, t0, n, p};
        const int64_t prev = (u - 1) & 1;
        unit_products<Kern::kSecondSigned>(
            kern.b + size_t(p) * kSuperBytes, unit, sums[u & 1], [&](int part) {
              kern.prefetch.step(pf_per_step);
              if (u > 0) kern.finish(sums[prev], fin[prev], units[prev], part);
            });
        fin[u & 1] = f;
        units[u & 1] = unit;
        ++u;
      }
    }
  }
  _tile_release();
  const int64_t last = (u - 1) & 1;
  for (int part = 0; part < 4; ++part) kern.finish(sums[last], fin[last], units[last], part);
}

// Writes a call's results to y: token t's 16 outputs (fewer where the
// pair's second group has fewer rows) are row(t), at y + t y_stride. Each
// token's outputs are one 64-byte strip of a row kilobytes long, a prompt's
// rows one after another: calls of kStreamMinTok tokens and more write whole
// strips with streaming stores (no read of the lines they replace) where y's
// rows are 64-byte aligned. Against plain stores, 1B-shaped Q4_K_M, Xeon,
// amx tier, A B A B A B: pp512 454 / 488 / 501 -> 532 / 555 / 522 tok/s; 64
// sequences' prompt phase +9-11%, their generation (64-token calls) +3-5%.
// The values are the same either way; the fence orders the streaming
// stores before the call's return (the pool's hand-off publishes them).
constexpr int kStreamMinTok = 64;

template <class Row>
inline void store_call_rows(float* y, int64_t y_stride, int n_valid, int n_rows1, Row row) {
  if (n_valid >= kStreamMinTok && n_rows1 == kGroupRows &&
      reinterpret_cast<uintptr_t>(y) % 64 == 0 && y_stride % 16 == 0) {
    for (int t = 0; t < n_valid; ++t) _mm512_stream_ps(y + t * y_stride, row(t));
    _mm_sfence();
    return;
  }
  const __mmask16 mask = __mmask16((1u << (kGroupRows + n_rows1)) - 1);
  for (int t = 0; t < n_valid; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, row(t));
}

// Where a call's groups lie, for the prefetch: gb bytes from a pair's first
// group to its second, `advance` from the call's groups to those of the
// run's next call (one matrix's adjacent groups: 2 gb for a pair, 4 gb for a
// quad; 2 gb for a gated quad, whose pairs are in two matrices).
struct GroupStream {
  size_t gb, advance;
  template <class Prefetch, size_t NG>
  [[gnu::always_inline]] void start(Prefetch& pf, const uint8_t* const (&g)[NG], size_t at,
                                    bool far) const {
    const uint8_t* pairs[NG / 2];
    for (size_t p = 0; p < NG / 2; ++p) pairs[p] = g[2 * p];
    pf.start(pairs, gb, advance, at, far);
  }
};

// The K-quants with mins (Q4_K, Q5_K): operands q * sh, q * sl per
// super-block, for NP pairs (pair p: groups g[2p], g[2p + 1]).
template <class L, int NP>
struct KernK4 {
  static constexpr int kPairs = NP;
  static constexpr bool kSecondSigned = false;
  // What a super-block's float steps need besides the sums: each pair's mins
  // (int16, sub-blocks 2k and 2k + 1 per lane pair), d and dmin.
  struct Fin {
    __m512i mv[NP][4];
    __m512 d[NP], dm[NP];
    bool first;  // super-block 0: the sums start from zero, not acc / mins
  };

  using Prefetch = SpreadPrefetch<L::kSuper, 2 * NP>;
  static constexpr int kLayoutSteps = 0;

  uint8_t* b;  // the current super-block's operands (NP x kSuperBytes)
  const uint8_t* g[2 * NP];
  GroupStream stream;
  float (*acc)[kAmxCallTok][16];  // [pair][token][output]
  float (*mins)[kAmxCallTok][16];
  int64_t nsb;
  Prefetch prefetch;

  // Starts super-block sb's prefetch (its lines go out in the tile steps:
  // kLayoutSteps = 0) and lays out its operands.
  Fin prepare(int64_t sb, int /*pf_per_step*/) {
    stream.start(prefetch, g, size_t(sb) * L::kSuper, prefetch_far(nsb * kQKK));
    Fin f;
    for (int p = 0; p < NP; ++p) {
      const uint8_t* group0 = g[2 * p];
      const uint8_t* group1 = g[2 * p + 1];
      unpack_super<L>(group0, group1, sb, b + size_t(p) * kSuperBytes);
      for (int k = 0; k < 4; ++k) {
        f.mv[p][k] = _mm512_cvtepu8_epi16(
            _mm256_set_m128i(load128(group1 + L::mn(sb, k)), load128(group0 + L::mn(sb, k))));
      }
      f.d[p] = join_halfs(group0 + L::d(sb), group1 + L::d(sb));
      f.dm[p] = join_halfs(group0 + L::dmin(sb), group1 + L::dmin(sb));
    }
    f.first = sb == 0;
    return f;
  }

  // kernel_k4_wide512's float steps, in its order. The mins' integer sum is
  // exact either way (vpdpwssd does not saturate): the same int32 as the
  // avx512 tier's vpmaddwd and adds.
  void finish(const UnitSums& c, const Fin& f, const Unit& unit, int part) const {
    int r0, r1;
    const int blk = part_rows(unit, part, &r0, &r1);
    const AmxActRows& at = blk == 0 ? *unit.a0 : *unit.a1;
    float(*a)[16] = acc[unit.pair] + unit.t0 + blk * kBlockTok;
    float(*mn)[16] = mins[unit.pair] + unit.t0 + blk * kBlockTok;
    const __m512i* mv = f.mv[unit.pair];
    const __m512 d = f.d[unit.pair], dm = f.dm[unit.pair];
    for (int r = r0; r < r1; ++r) {
      const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[blk][0][r]), 3),
                                            _mm512_load_si512(c[blk][1][r]));
      __m512i m = _mm512_madd_epi16(mv[0], bcast32_512(&at.bsum_pairs[r][0]));
      for (int k = 1; k < 4; ++k) {
        m = _mm512_dpwssd_epi32(m, mv[k], bcast32_512(&at.bsum_pairs[r][2 * k]));
      }
      const __m512 da = _mm512_set1_ps(at.d[r]);
      const __m512 a0 = f.first ? _mm512_setzero_ps() : _mm512_load_ps(a[r]);
      const __m512 m0 = f.first ? _mm512_setzero_ps() : _mm512_load_ps(mn[r]);
      _mm512_store_ps(a[r], _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum), a0));
      _mm512_store_ps(mn[r], _mm512_fmadd_ps(_mm512_mul_ps(dm, da), _mm512_cvtepi32_ps(m), m0));
    }
  }
};

// Runs a call on Kern's kPairs pairs and writes pair p's outputs to y + 16 p
// (row(p, t): token t's; the last pair's second group n_rows_last valid), or
// for a gated quad (act not kNone: pair 0 of W_gate, pair 1 the same rows of
// W_up) only act(gate, up) of its 16 outputs, ops_avx2.cc's swiglu_avx2 /
// geglu_avx2 lane for lane: half the bytes of both written out, and half to
// read back for the down projection's activations.
template <class Kern, class Row>
void run_and_store(Kern& kern, const AmxActRows* act16, size_t act16_block, int n_valid, float* y,
                   int64_t y_stride, int n_rows_last, Gate act, Row row) {
  run_call(kern, kern.nsb, act16, act16_block, n_valid);
  if constexpr (Kern::kPairs == 2) {
    if (act != Gate::kNone) {
      store_call_rows(y, y_stride, n_valid, n_rows_last, [&](int t) {
        return act == Gate::kSwiglu ? omnibus::avx512::swiglu_ps(row(0, t), row(1, t))
                                    : omnibus::avx512::geglu_ps(row(0, t), row(1, t));
      });
      return;
    }
  }
  for (int p = 0; p < Kern::kPairs; ++p) {
    store_call_rows(y + 16 * p, y_stride, n_valid, p + 1 < Kern::kPairs ? kGroupRows : n_rows_last,
                    [&](int t) { return row(p, t); });
  }
}

// Q4_K / Q5_K on NP pairs: groups g[0..2 NP) (stream: where they lie).
template <class L, int NP>
void amx_k4(const uint8_t* const (&g)[2 * NP], GroupStream stream, int64_t nsb,
            const AmxActRows* act16, size_t act16_block, int n_valid, float* y, int64_t y_stride,
            int n_rows_last, Gate act) {
  alignas(64) uint8_t b[NP * kSuperBytes];
  alignas(64) float acc[NP][kAmxCallTok][16], mins[NP][kAmxCallTok][16];
  // (written first by super-block 0's float steps, from zero: nsb >= 1,
  // matmul_multi answers empty rows itself)
  KernK4<L, NP> kern{b, {}, stream, acc, mins, nsb, {}};
  std::copy_n(g, 2 * NP, kern.g);
  run_and_store(kern, act16, act16_block, n_valid, y, y_stride, n_rows_last, act,
                [&](int p, int t) {
                  return _mm512_sub_ps(_mm512_load_ps(acc[p][t]), _mm512_load_ps(mins[p][t]));
                });
}

template <class L>
void amx_pair(const uint8_t* group0, const uint8_t* group1, int64_t nsb, const AmxActRows* act16,
              size_t act16_block, int n_valid, float* y, int64_t y_stride, int n_rows1) {
  const size_t gb = size_t(nsb) * L::kSuper;
  amx_k4<L, 1>({group0, group1}, {gb, 2 * gb}, nsb, act16, act16_block, n_valid, y, y_stride,
               n_rows1, Gate::kNone);
}

template <class L>
void amx_quad(const uint8_t* group0, size_t gb, int64_t nsb, const AmxActRows* act16,
              size_t act16_block, int n_valid, float* y, int64_t y_stride, int n_rows3) {
  amx_k4<L, 2>({group0, group0 + gb, group0 + 2 * gb, group0 + 3 * gb}, {gb, 4 * gb}, nsb, act16,
               act16_block, n_valid, y, y_stride, n_rows3, Gate::kNone);
}

template <class L>
void amx_gated(const uint8_t* gate0, const uint8_t* up0, size_t gb, int64_t nsb,
               const AmxActRows* act16, size_t act16_block, int n_valid, float* y, int64_t y_stride,
               Gate act) {
  amx_k4<L, 2>({gate0, gate0 + gb, up0, up0 + gb}, {gb, 2 * gb}, nsb, act16, act16_block, n_valid,
               y, y_stride, kGroupRows, act);
}

// ------------------------------------------------------------------ Q6_K
//
// A Q6_K super-block's isum = sum_s sc_s * sum_{k in s} (q[k] - 32) a[k]
// (int8 scales per 16 elements, q in [0, 63]). Each weight's whole product
// w = (q - 32) sc_s is in [-4096, 4064]: its two bytes, w = 256 hi + lo with
// lo in [0, 255] (unsigned) and hi in [-16, 15] (signed), make isum two plain
// byte dot products:
//   isum = 256 * sum_k hi[k] a[k] + sum_k lo[k] a[k]
// (tdpbssd for hi, tdpbsud for lo; every partial sum fits an int32: the same
// int32 as every tier's).

// Per super-block of a pair: [c][lo, hi][16 rows k4][64 bytes].
constexpr size_t kSuperBytes6 = 4 * 2 * kTileBytes;
static_assert(kSuperBytes6 == kSuperBytes, "unit_products finds pair 1's operands kSuperBytes on");

// The top two bits of unpacked vector 4s + M (qh: both groups' 32 bytes of
// sub-block s) as bits 4-5 of each byte: matmul_packed_kquants.inc's
// q6_top_bits on 64 bytes (16-bit shifts: what crosses a byte boundary
// never reaches bits 4-5).
template <int M>
inline __m512i q6_top_bits512(__m512i qh) {
  const __m512i m30 = _mm512_set1_epi8(0x30);
  if constexpr (M <= 2)
    return _mm512_and_si512(_mm512_slli_epi16(qh, 4 - 2 * M), m30);
  else
    return _mm512_and_si512(_mm512_srli_epi16(qh, 2 * M - 4), m30);
}

// Super-block sb's operands straight from the packed quants, in one pass:
// per sub-block s, its 4 unpacked vectors k4 = 4s + m (elements 4 k4..4 k4 +
// 3 of a group's 8 rows: one tile row; group 0's in the low half), each the
// bytes the avx512 tier's unpack_q6_K gives (q6_K_vectors on both groups at
// once), then split as below.
template <class Prefetch>
[[gnu::always_inline]] inline void unpack_super6(const uint8_t* group0, const uint8_t* group1,
                                                 int64_t sb, uint8_t* o, Prefetch& pf, int pf_n) {
  const __m512i lo8 = _mm512_set1_epi16(0x00FF), hi8 = _mm512_set1_epi16(int16_t(0xFF00));
  const __m512i m4 = _mm512_set1_epi8(0x0F), k32 = _mm512_set1_epi8(32);
  for (int s = 0; s < 16; ++s) {
    pf.step(pf_n);
    int64_t sc0, sc1;
    std::memcpy(&sc0, group0 + sc6(sb, s), 8);
    std::memcpy(&sc1, group1 + sc6(sb, s), 8);
    // each output's scale in both 16-bit halves of its lane (output n:
    // lanes 2n, 2n + 1, its 4 bytes)
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_set_epi64x(sc1, sc0));
    const __m512i sc16 =
        _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(sc, 16));
    const __m512i qh = join256u(group0 + qh6(sb, s), group1 + qh6(sb, s));
    __m512i v[4];
    for (int h = 0; h < 2; ++h) {  // q6_K_vectors<h>: vectors 4s + 2h, 4s + 2h + 1
      const __m512i wq = join256u(group0 + ql6(sb, 2 * s + h), group1 + ql6(sb, 2 * s + h));
      const __m512i top0 = h == 0 ? q6_top_bits512<0>(qh) : q6_top_bits512<2>(qh);
      const __m512i top1 = h == 0 ? q6_top_bits512<1>(qh) : q6_top_bits512<3>(qh);
      v[2 * h] = _mm512_or_si512(_mm512_and_si512(wq, m4), top0);
      v[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(wq, 4), m4), top1);
    }
    for (int m = 0; m < 4; ++m) {
      const int k4 = 4 * s + m, c = k4 / 16, r = k4 % 16;
      const __m512i x = _mm512_sub_epi8(v[m], k32);
      // the even and odd bytes as int16, each product w in its own lane
      const __m512i we = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(x, 8), 8), sc16);
      const __m512i wo = _mm512_mullo_epi16(_mm512_srai_epi16(x, 8), sc16);
      uint8_t* lo = o + (size_t(c) * 2 * 16 + size_t(r)) * 64;
      _mm512_store_si512(lo, _mm512_or_si512(_mm512_and_si512(we, lo8), _mm512_slli_epi16(wo, 8)));
      _mm512_store_si512(lo + kTileBytes,
                         _mm512_or_si512(_mm512_srli_epi16(we, 8), _mm512_and_si512(wo, hi8)));
    }
  }
}

// Q6_K: operands the low and high bytes of (q - 32) sc per super-block, for
// NP pairs.
template <int NP>
struct KernQ6K {
  static constexpr int kPairs = NP;
  static constexpr bool kSecondSigned = true;  // the high bytes
  struct Fin {
    __m512 d[NP];
    bool first;  // super-block 0: the sums start from zero, not acc
  };

  using Prefetch = SpreadPrefetch<kSuper6, 2 * NP>;
  static constexpr int kLayoutSteps = 16 * NP;

  uint8_t* b;  // the current super-block's operands (NP x kSuperBytes6)
  const uint8_t* g[2 * NP];
  GroupStream stream;
  float (*acc)[kAmxCallTok][16];  // [pair][token][output]
  int64_t nsb;
  Prefetch prefetch;

  // Starts super-block sb's prefetch and lays out its operands, issuing
  // pf_per_step of its lines a layout step.
  Fin prepare(int64_t sb, int pf_per_step) {
    stream.start(prefetch, g, size_t(sb) * kSuper6, prefetch_far(nsb * kQKK));
    Fin f;
    for (int p = 0; p < NP; ++p) {
      unpack_super6(g[2 * p], g[2 * p + 1], sb, b + size_t(p) * kSuperBytes6, prefetch,
                    pf_per_step);
      f.d[p] = join_halfs(g[2 * p] + d6(sb), g[2 * p + 1] + d6(sb));
    }
    f.first = sb == 0;
    return f;
  }

  // kernel_q6_K's float step, in its order.
  void finish(const UnitSums& c, const Fin& f, const Unit& unit, int part) const {
    int r0, r1;
    const int blk = part_rows(unit, part, &r0, &r1);
    const AmxActRows& at = blk == 0 ? *unit.a0 : *unit.a1;
    float(*a)[16] = acc[unit.pair] + unit.t0 + blk * kBlockTok;
    for (int r = r0; r < r1; ++r) {
      const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c[blk][1][r]), 8),
                                            _mm512_load_si512(c[blk][0][r]));
      _mm512_store_ps(a[r], _mm512_fmadd_ps(_mm512_mul_ps(f.d[unit.pair], _mm512_set1_ps(at.d[r])),
                                            _mm512_cvtepi32_ps(isum),
                                            f.first ? _mm512_setzero_ps() : _mm512_load_ps(a[r])));
    }
  }
};

// Q6_K on NP pairs: groups g[0..2 NP) (stream: where they lie).
template <int NP>
void amx_q6_K(const uint8_t* const (&g)[2 * NP], GroupStream stream, int64_t nsb,
              const AmxActRows* act16, size_t act16_block, int n_valid, float* y, int64_t y_stride,
              int n_rows_last, Gate act) {
  alignas(64) uint8_t b[NP * kSuperBytes6];
  alignas(64) float acc[NP][kAmxCallTok][16];
  // (written first by super-block 0's float step, from zero: nsb >= 1)
  KernQ6K<NP> kern{b, {}, stream, acc, nsb, {}};
  std::copy_n(g, 2 * NP, kern.g);
  run_and_store(kern, act16, act16_block, n_valid, y, y_stride, n_rows_last, act,
                [&](int p, int t) { return _mm512_load_ps(acc[p][t]); });
}

void amx_pair_q6_K(const uint8_t* group0, const uint8_t* group1, int64_t nsb,
                   const AmxActRows* act16, size_t act16_block, int n_valid, float* y,
                   int64_t y_stride, int n_rows1) {
  const size_t gb = size_t(nsb) * kSuper6;
  amx_q6_K<1>({group0, group1}, {gb, 2 * gb}, nsb, act16, act16_block, n_valid, y, y_stride,
              n_rows1, Gate::kNone);
}

void amx_quad_q6_K(const uint8_t* group0, size_t gb, int64_t nsb, const AmxActRows* act16,
                   size_t act16_block, int n_valid, float* y, int64_t y_stride, int n_rows3) {
  amx_q6_K<2>({group0, group0 + gb, group0 + 2 * gb, group0 + 3 * gb}, {gb, 4 * gb}, nsb, act16,
              act16_block, n_valid, y, y_stride, n_rows3, Gate::kNone);
}

void amx_gated_q6_K(const uint8_t* gate0, const uint8_t* up0, size_t gb, int64_t nsb,
                    const AmxActRows* act16, size_t act16_block, int n_valid, float* y,
                    int64_t y_stride, Gate act) {
  amx_q6_K<2>({gate0, gate0 + gb, up0, up0 + gb}, {gb, 2 * gb}, nsb, act16, act16_block, n_valid, y,
              y_stride, kGroupRows, act);
}

template <class L>
Ops with_amx(const Ops& avx512_ops) {
  Ops o = avx512_ops;
  o.amx_pair = amx_pair<L>;
  o.amx_quad = amx_quad<L>;
  o.amx_gated = amx_gated<L>;
  return o;
}

}  // namespace

const Ops& ops_q4_K() {
  static const Ops ops = with_amx<LayoutQ4_K>(avx512::ops_q4_K());
  return ops;
}

const Ops& ops_q5_K() {
  static const Ops ops = with_amx<LayoutQ5_K>(avx512::ops_q5_K());
  return ops;
}

const Ops& ops_q6_K() {
  static const Ops ops = [] {
    Ops o = avx512::ops_q6_K();
    o.amx_pair = amx_pair_q6_K;
    o.amx_quad = amx_quad_q6_K;
    o.amx_gated = amx_gated_q6_K;
    return o;
  }();
  return ops;
}

}  // namespace omnibus::matmul_packed::internal::amx
