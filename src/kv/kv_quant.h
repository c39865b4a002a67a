// Quantized KV-cache formats: byte layouts and scalar row codecs (the
// reference that tests and the AVX2 kernels are held to). The full layouts,
// with the reasons behind them, are in docs/kv-quantization.md.
//
// A KV pool is per layer and per K/V: [n_blocks, n_kv_heads] "units", each
// unit holding one block's block_size rows of one KV head in the format:
//
//   f32    float [bs][hd]
//   f16    fp16 [bs][hd]
//   q8     int8 codes [bs][hd] | fp16 d [bs][hd/G]         x = d * q, d = absmax / 127
//          per group of G = 32 channels (G = hd if hd % 32 != 0: kv_q8_group),
//          of the row rotated by kv_hadamard (K and V alone: a query reads
//          (H q) . dequant(row) and H * sum p_j dequant(row_j)); the row codecs
//          below work in the rotated space, kv_read_row rotates back
//   q4     K unit: KIVI keys at 4 bits (below, b = 4)
//          V unit: codes [bs][hd/2] | {fp16 d, fp16 m} [bs][hd/G]   per token:
//          x = m + d * q, q in 0..15, groups of G = 32 channels (G = hd if
//          hd % 32 != 0); in a group's G/2 bytes, byte j holds channel j (low
//          nibble) and j + G/2 (high nibble)
//   kivi2  K unit: KIVI keys at 2 bits (below, b = 2)
//          V unit: codes [bs][hd/4] | {fp16 d, fp16 m} [bs]  (2 bits, per token,
//          of the row rotated by kv_hadamard: a query reads H * dequant(row);
//          range kv_gauss_range, values beyond it clamped)
//   KIVI keys (b bits): header {f32 smax, u8 state, 3 pad} | stats | codes [bs][hd*b/8]
//            state kKiviOpen: group not complete, keys live in the f16 residual
//            state kKiviSealed: per channel over the block's bs tokens (KIVI):
//              stats = fp16 m [hd] | u8 e [hd], d_c = smax * 2^(-e_c / 16)
//            state kKiviPerToken: fallback when no residual slot was free:
//              stats = {fp16 d, fp16 m} [bs], per token over the row
//          b-bit rows: byte j holds channels j + k * hd*b/8 at bits b*k (k < 8/b).
//   Key ranges are [min, max] (clipping a key outlier costs more than the
//   resolution it buys: measured); kivi2's rotated values use kv_gauss_range.
//
// The formats are named by KvFormat (kv/kv_format.h, with their traits).
//
// Thread-safety: pure functions on caller-owned memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kv/kv_format.h"

namespace omnibus {

// kivi2 K unit states.
constexpr uint8_t kKiviOpen = 0;
constexpr uint8_t kKiviSealed = 1;
constexpr uint8_t kKiviPerToken = 2;

int kv_q4_group(int head_dim);
int kv_q8_group(int head_dim);  // channels per q8 scale: 32, or hd if hd % 32 != 0

// Per-token layouts (q8; the V units of q4 and kivi2) start with the codes
// [bs][hd * bits / 8]; the per-row (per-group) scales follow at this 4-byte-aligned offset.
inline size_t kv_row_codes_bytes(int bs, int hd, int bits) {
  return (static_cast<size_t>(bs) * hd * bits / 8 + 3) / 4 * 4;
}

// x[0..hd) <- H x, H the orthonormal Walsh-Hadamard matrix over blocks of
// the largest power of two dividing hd (at most 256). H is symmetric and its
// own inverse; it spreads an outlier channel over the block, which is what
// per-token 2-bit values need. Fixed operation order (batch invariance).
void kv_hadamard(float* x, int hd);

// The 2-bit range [*lo, *hi] of a (rotated) value row x[0..n): mu +- 1.5
// sigma, inside [min, max]. The uniform 4-level quantizer with the least
// squared error for a Gaussian has a step of ~1.0 sigma (J. Max, 1960), and a
// Hadamard-rotated row is close to Gaussian; [min, max] would spend the step
// on the row's two extremes (step ~1.6 sigma at 64 channels).
void kv_gauss_range(const float* x, int n, float* lo, float* hi);

// Offsets inside a KIVI K unit.
struct KiviKLayout {
  size_t stats;  // start of the stats region (after the 8-byte header)
  size_t codes;  // start of the codes [bs][hd/4]
  size_t bytes;  // unit size
};
KiviKLayout kivi_k_layout(int block_size, int head_dim, int bits);

// d_c = smax * kivi_exp2_table()[e_c], entry e = 2^(-e/16).
const float* kivi_exp2_table();

// --- row codecs (scalar reference). `unit` is the (block, head) unit. ---
void q8_store_row(uint8_t* unit, int bs, int hd, int row, const float* x);
void q8_load_row(const uint8_t* unit, int bs, int hd, int row, float* y);
void q4_store_row(uint8_t* unit, int bs, int hd, int row, const float* x);
void q4_load_row(const uint8_t* unit, int bs, int hd, int row, float* y);

// 2-bit per-token rows: codes [hd/4] at `codes`, {d, m} at `dm`.
void q2_store_row(uint8_t* codes, uint16_t* dm, int hd, const float* x);
void q2_load_row(const uint8_t* codes, const uint16_t* dm, int hd, float* y);

// kivi2 V row `row` of a V unit; x and y are in the rotated space (H * value).
void kivi_v_store_row(uint8_t* unit, int bs, int hd, int row, const float* x);
void kivi_v_load_row(const uint8_t* unit, int bs, int hd, int row, float* y);

// KIVI K units of `bits` bits (2: kivi2, 4: q4).
inline uint8_t kivi_k_state(const uint8_t* kunit) { return kunit[4]; }
void kivi_k_set_state(uint8_t* kunit, uint8_t state);
// Seals a K unit: per-channel quantization of rows x [bs][hd] (f32 values).
void kivi_k_seal(uint8_t* kunit, int bs, int hd, int bits, const float* x);
// Per-token K row (state kKiviPerToken).
void kivi_k_store_row_per_token(uint8_t* kunit, int bs, int hd, int bits, int row, const float* x);
// Rewrites one row of a sealed unit with its existing per-channel stats (codes clamped).
void kivi_k_store_row_sealed(uint8_t* kunit, int bs, int hd, int bits, int row, const float* x);
// Per-channel {d, m} of a sealed unit: d[hd], m[hd].
void kivi_k_channel_stats(const uint8_t* kunit, int hd, float* d, float* m);
// The stats region of a sealed unit, as the readers above decode it:
// m_c = fp16 m16[c], d_c = smax * kivi_exp2_table()[e[c]].
struct KiviKStats {
  float smax;
  const uint8_t* m16;  // fp16 [hd]
  const uint8_t* e;    // u8 [hd]
};
KiviKStats kivi_k_stats(const uint8_t* kunit, int hd);
// REQUIRES state is kKiviSealed or kKiviPerToken.
void kivi_k_load_row(const uint8_t* kunit, int bs, int hd, int bits, int row, float* y);

}  // namespace omnibus
