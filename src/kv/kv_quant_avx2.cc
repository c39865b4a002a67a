// AVX2 dequantization of KV rows into f32 tiles for paged attention
// (layouts: kv_quant.h). Shapes the fast paths do not cover (q4 values with
// head_dim % 32 != 0, 2-bit rows with head_dim % 32 != 0, 4-bit rows with
// head_dim % 16 != 0) use the scalar row codecs. kivi2 values come out in the
// rotated space (the kernel rotates its output back).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kv/attention_internal.h"
#include "kv/kv_quant.h"
#include "kv/kv_quant_paged.h"

namespace omnibus {
namespace {

// An fp16 scale or offset, converted by F16C (exact, as fp16_to_fp32).
inline float ld16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256 u8x8_to_ps(const uint8_t* p, int shift, int mask) {
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  __m256i v = _mm256_cvtepu8_epi32(b);
  v = _mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask));
  return _mm256_cvtepi32_ps(v);
}

// The low and high 8 bytes of b (codes in 0..255) as f32.
inline __m256 lo8_to_ps(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }
inline __m256 hi8_to_ps(__m128i b) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b)));
}
// Bits [shift, shift + b) of each of 16 bytes (mask = 2^b - 1), as bytes.
inline __m128i bits16(__m128i b, int shift, int mask) {
  return _mm_and_si128(_mm_srl_epi16(b, _mm_cvtsi32_si128(shift)),
                       _mm_set1_epi8(static_cast<char>(mask)));
}

void q8_rows(const uint8_t* unit, int bs, int hd, int r0, int r1, float* y) {
  const int g = kv_q8_group(hd), ng = hd / g;
  const uint8_t* scales = unit + kv_row_codes_bytes(bs, hd, 8);
  for (int r = r0; r < r1; ++r, y += hd) {
    const uint8_t* q = unit + size_t(r) * hd;
    const uint8_t* sr = scales + size_t(2) * r * ng;
    for (int gi = 0, c = 0; gi < ng; ++gi) {
      const __m256 d = _mm256_set1_ps(ld16(sr + 2 * gi));
      for (const int end = c + g; c < end; c += 8) {
        const __m256i v =
            _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + c)));
        _mm256_storeu_ps(y + c, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
      }
    }
  }
}

void q4_rows(const uint8_t* unit, int bs, int hd, int r0, int r1, float* y) {
  if (kv_q4_group(hd) != 32) {
    for (int r = r0; r < r1; ++r, y += hd) q4_load_row(unit, bs, hd, r, y);
    return;
  }
  const int ng = hd / 32;
  const uint8_t* dm_base = unit + kv_row_codes_bytes(bs, hd, 4);
  for (int r = r0; r < r1; ++r, y += hd) {
    const uint8_t* codes = unit + size_t(r) * (hd / 2);
    const uint8_t* dm = dm_base + size_t(r) * ng * 4;
    for (int g = 0; g < ng; ++g) {
      const __m256 d = _mm256_set1_ps(ld16(dm + 4 * g)), m = _mm256_set1_ps(ld16(dm + 4 * g + 2));
      // 16 bytes: channel j in the low nibble of byte j, j + 16 in its high one
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + g * 16));
      const __m128i lo = bits16(b, 0, 15), hi = bits16(b, 4, 15);
      float* o = y + g * 32;
      _mm256_storeu_ps(o, _mm256_fmadd_ps(d, lo8_to_ps(lo), m));
      _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(d, hi8_to_ps(lo), m));
      _mm256_storeu_ps(o + 16, _mm256_fmadd_ps(d, lo8_to_ps(hi), m));
      _mm256_storeu_ps(o + 24, _mm256_fmadd_ps(d, hi8_to_ps(hi), m));
    }
  }
}

// One b-bit row: y[j + k*q] = m[.] + d[.] * code (q = hd*b/8), per channel
// (dv/mv arrays) or per token (broadcast). REQUIRES row_fast(hd, bits).
inline bool row_fast(int hd, int bits) { return (hd * bits / 8) % 8 == 0 && hd % (8 / bits) == 0; }
inline void qb_row(const uint8_t* codes, int hd, int bits, const float* dv, const float* mv,
                   float d, float m, float* y) {
  const int per = 8 / bits, q = hd / per, mask = (1 << bits) - 1;
  if (q % 16 == 0) {  // 16 bytes at a time, each plane k unpacked on bytes
    for (int j = 0; j < q; j += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j));
      for (int k = 0; k < per; ++k) {
        const __m128i x = bits16(b, bits * k, mask);
        const int c = j + k * q;
        const __m256 vd0 = dv ? _mm256_loadu_ps(dv + c) : _mm256_set1_ps(d);
        const __m256 vm0 = mv ? _mm256_loadu_ps(mv + c) : _mm256_set1_ps(m);
        const __m256 vd1 = dv ? _mm256_loadu_ps(dv + c + 8) : _mm256_set1_ps(d);
        const __m256 vm1 = mv ? _mm256_loadu_ps(mv + c + 8) : _mm256_set1_ps(m);
        _mm256_storeu_ps(y + c, _mm256_fmadd_ps(vd0, lo8_to_ps(x), vm0));
        _mm256_storeu_ps(y + c + 8, _mm256_fmadd_ps(vd1, hi8_to_ps(x), vm1));
      }
    }
    return;
  }
  for (int k = 0; k < per; ++k) {
    for (int j = 0; j < q; j += 8) {
      const __m256 x = u8x8_to_ps(codes + j, bits * k, mask);
      const int c = j + k * q;
      const __m256 vd = dv ? _mm256_loadu_ps(dv + c) : _mm256_set1_ps(d);
      const __m256 vm = mv ? _mm256_loadu_ps(mv + c) : _mm256_set1_ps(m);
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(vd, x, vm));
    }
  }
}

void kivi_v_rows(const uint8_t* unit, int bs, int hd, int r0, int r1, float* y) {
  const uint8_t* dm = unit + kv_row_codes_bytes(bs, hd, 2);
  for (int r = r0; r < r1; ++r, y += hd) {
    if (!row_fast(hd, 2)) {
      kivi_v_load_row(unit, bs, hd, r, y);
      continue;
    }
    qb_row(unit + size_t(r) * (hd / 4), hd, 2, nullptr, nullptr, ld16(dm + 4 * r),
           ld16(dm + 4 * r + 2), y);
  }
}

// kivi_k_channel_stats, 8 channels at a time: the same values (an fp16
// conversion is exact, d_c is the same single product smax * 2^(-e_c/16)).
// REQUIRES hd % 8 == 0.
void channel_stats(const uint8_t* unit, int hd, float* d, float* m) {
  const KiviKStats st = kivi_k_stats(unit, hd);
  const float* t = kivi_exp2_table();
  const __m256 vs = _mm256_set1_ps(st.smax);
  for (int c = 0; c < hd; c += 8) {
    _mm256_storeu_ps(
        m + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(st.m16 + 2 * c))));
    const __m256i e =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(st.e + c)));
    _mm256_storeu_ps(d + c, _mm256_mul_ps(vs, _mm256_i32gather_ps(t, e, 4)));
  }
}

// KIVI keys of `bits` bits.
void kivi_k_rows(const uint8_t* unit, int bs, int hd, int bits, int r0, int r1, float* y) {
  const uint8_t state = kivi_k_state(unit);
  if (state == kKiviOpen) {
    std::fill_n(y, size_t(r1 - r0) * hd, 0.f);
    return;
  }
  if (!row_fast(hd, bits) || hd > 512) {
    for (int r = r0; r < r1; ++r, y += hd) kivi_k_load_row(unit, bs, hd, bits, r, y);
    return;
  }
  const KiviKLayout l = kivi_k_layout(bs, hd, bits);
  const size_t row_bytes = size_t(hd) * bits / 8;
  if (state == kKiviPerToken) {
    const uint8_t* dm = unit + l.stats;
    for (int r = r0; r < r1; ++r, y += hd) {
      qb_row(unit + l.codes + size_t(r) * row_bytes, hd, bits, nullptr, nullptr, ld16(dm + 4 * r),
             ld16(dm + 4 * r + 2), y);
    }
    return;
  }
  alignas(32) float d[512], m[512];
  channel_stats(unit, hd, d, m);
  for (int r = r0; r < r1; ++r, y += hd)
    qb_row(unit + l.codes + size_t(r) * row_bytes, hd, bits, d, m, 0.f, 0.f, y);
}

}  // namespace

void kv_hadamard_avx2(float* x, int hd, int n) {
  const __m256 scale = _mm256_set1_ps(1.f / std::sqrt(float(n)));
  for (int b = 0; b < hd; b += n) {
    float* y = x + b;
    // len 1, 2, 4: inside each 8-lane vector; lane i gets a + c (low member
    // of its pair) or a - c (high member), with a the low and c the high value
    for (int i = 0; i < n; i += 8) {
      __m256 v = _mm256_loadu_ps(y + i);
      __m256 sw = _mm256_permute_ps(v, 0xB1);  // [1 0 3 2 ...]
      v = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xAA);
      sw = _mm256_permute_ps(v, 0x4E);  // [2 3 0 1 ...]
      v = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xCC);
      sw = _mm256_permute2f128_ps(v, v, 0x01);  // halves swapped
      v = _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), 0xF0);
      _mm256_storeu_ps(y + i, v);
    }
    for (int len = 8; len < n; len *= 2) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; j += 8) {
          const __m256 a = _mm256_loadu_ps(y + j), c = _mm256_loadu_ps(y + j + len);
          _mm256_storeu_ps(y + j, _mm256_add_ps(a, c));
          _mm256_storeu_ps(y + j + len, _mm256_sub_ps(a, c));
        }
      }
    }
    for (int i = 0; i < n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), scale));
  }
}

void kv_dequant_rows_avx2(const PagedKvLayer& kv, const AttentionSeq& s, bool is_v, int h,
                          int32_t j0, int32_t j1, float* y) {
  const int bs = kv.block_size, hd = kv.head_dim;
  for (int32_t j = j0; j < j1;) {
    const int32_t blk_end = std::min<int32_t>(j1, (j / bs + 1) * bs);
    const uint8_t* unit = kv_unit(kv, is_v, s.block_table[j / bs], h);
    const int r0 = j % bs, r1 = r0 + (blk_end - j);
    switch (kv.format) {
      case KvFormat::kQ8:
        q8_rows(unit, bs, hd, r0, r1, y);
        break;
      case KvFormat::kQ4:
        if (is_v) {
          q4_rows(unit, bs, hd, r0, r1, y);
        } else {
          kivi_k_rows(unit, bs, hd, 4, r0, r1, y);
        }
        break;
      default:
        if (is_v) {
          kivi_v_rows(unit, bs, hd, r0, r1, y);
        } else {
          kivi_k_rows(unit, bs, hd, 2, r0, r1, y);
        }
        break;
    }
    y += size_t(blk_end - j) * hd;
    j = blk_end;
  }
}

}  // namespace omnibus
