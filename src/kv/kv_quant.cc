// Scalar reference codecs of the KV formats (layouts: kv_quant.h).
#include "kv/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu_features.h"
#include "kv/attention_internal.h"
#include "util/check.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

size_t round4(size_t n) { return (n + 3) / 4 * 4; }

inline float ld16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}
inline void st16(uint8_t* p, float x) {
  const uint16_t h = fp32_to_fp16(x);
  std::memcpy(p, &h, 2);
}

// Asymmetric quantization of x[0..n) to levels 0..n_levels-1: stores {d, m}
// as fp16 and returns the decoded pair; codes use the decoded values.
void minmax(const float* x, int n, float* lo, float* hi) {
  if (n >= 8 && n % 8 == 0 && cpu_features().use_avx2())
    return kv_minmax_avx2(x, n, lo, hi);  // the same values
  float a = x[0], b = x[0];
  for (int i = 1; i < n; ++i) {
    a = std::min(a, x[i]);
    b = std::max(b, x[i]);
  }
  *lo = a;
  *hi = b;
}

inline int quant_level(float x, float d, float m, int max_level) {
  if (!(d > 0.f)) return 0;
  const int q = static_cast<int>(std::lrint((x - m) / d));
  return std::clamp(q, 0, max_level);
}

// b-bit row codes: byte j holds channels j + k * hd*b/8 at bits b*k.
void pack_row(uint8_t* codes, int hd, int bits, const float* x, const float* d, const float* m,
              bool per_channel) {
  const int per = 8 / bits, q = hd / per, max_level = (1 << bits) - 1;
  if (q % 16 == 0 && cpu_features().use_avx2())
    return kv_pack_row_avx2(codes, hd, bits, x, d, m, per_channel);
  for (int j = 0; j < q; ++j) {
    uint8_t b = 0;
    for (int k = 0; k < per; ++k) {
      const int c = j + k * q;
      const float dc = per_channel ? d[c] : d[0];
      const float mc = per_channel ? m[c] : m[0];
      b = uint8_t(b | quant_level(x[c], dc, mc, max_level) << (bits * k));
    }
    codes[j] = b;
  }
}

inline int code_at(const uint8_t* codes, int hd, int bits, int c) {
  const int q = hd / (8 / bits);
  return (codes[c % q] >> (bits * (c / q))) & ((1 << bits) - 1);
}

// Per-token b-bit row over the whole row: {d, m} fp16 at dm; range [min,
// max], or kv_gauss_range (2 bits only) when `gauss`.
void store_row_per_token(uint8_t* codes, uint16_t* dm, int hd, int bits, const float* x,
                         bool gauss) {
  float lo, hi;
  if (gauss) {
    OMNIBUS_DCHECK(bits == 2);
    kv_gauss_range(x, hd, &lo, &hi);
  } else {
    minmax(x, hd, &lo, &hi);
  }
  dm[0] = fp32_to_fp16((hi - lo) / float((1 << bits) - 1));
  dm[1] = fp32_to_fp16(lo);
  const float d = fp16_to_fp32(dm[0]), m = fp16_to_fp32(dm[1]);
  pack_row(codes, hd, bits, x, &d, &m, false);
}

void load_row_per_token(const uint8_t* codes, const uint16_t* dm, int hd, int bits, float* y) {
  const float d = fp16_to_fp32(dm[0]), m = fp16_to_fp32(dm[1]);
  for (int c = 0; c < hd; ++c) y[c] = m + d * float(code_at(codes, hd, bits, c));
}

}  // namespace

void kv_hadamard(float* x, int hd) {
  int n = 1;
  while (n < 256 && hd % (2 * n) == 0) n *= 2;
  if (n >= 8 && cpu_features().use_avx2()) return kv_hadamard_avx2(x, hd, n);  // the same bits
  const float scale = 1.f / std::sqrt(float(n));
  for (int b = 0; b < hd; b += n) {
    float* y = x + b;
    for (int len = 1; len < n; len *= 2) {
      for (int i = 0; i < n; i += 2 * len) {
        for (int j = i; j < i + len; ++j) {
          const float a = y[j], c = y[j + len];
          y[j] = a + c;
          y[j + len] = a - c;
        }
      }
    }
    for (int i = 0; i < n; ++i) y[i] *= scale;
  }
}

void kv_gauss_range(const float* x, int n, float* lo, float* hi) {
  float a = x[0], b = x[0];
  double s1 = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    a = std::min(a, x[i]);
    b = std::max(b, x[i]);
    s1 += x[i];
    s2 += double(x[i]) * x[i];
  }
  const double mu = s1 / n, sd = std::sqrt(std::max(0.0, s2 / n - mu * mu));
  *lo = std::max(a, float(mu - 1.5 * sd));
  *hi = std::min(b, float(mu + 1.5 * sd));
  if (!(*hi > *lo)) {  // constant row (or rounding): keep [min, max]
    *lo = a;
    *hi = b;
  }
}

int kv_q4_group(int head_dim) { return head_dim % 32 == 0 ? 32 : head_dim; }
int kv_q8_group(int head_dim) { return head_dim % 32 == 0 ? 32 : head_dim; }

KiviKLayout kivi_k_layout(int bs, int hd, int bits) {
  KiviKLayout l;
  l.stats = 8;
  l.codes = l.stats + round4(std::max<size_t>(size_t(3) * hd, size_t(4) * bs));
  l.bytes = round4(l.codes + size_t(bs) * (hd * bits / 8));
  return l;
}

KvUnitBytes kv_unit_bytes(KvFormat f, int bs, int hd) {
  OMNIBUS_CHECK(kv_format_supports_head_dim(f, hd) && bs > 0);
  const size_t n = size_t(bs) * size_t(hd);
  switch (f) {
    case KvFormat::kF32:
      return {n * 4, n * 4};
    case KvFormat::kF16:
      return {n * 2, n * 2};
    case KvFormat::kQ8: {
      const size_t b =
          round4(kv_row_codes_bytes(bs, hd, 8) + size_t(2) * bs * (hd / kv_q8_group(hd)));
      return {b, b};
    }
    case KvFormat::kQ4: {
      const size_t v = kv_row_codes_bytes(bs, hd, 4) + size_t(bs) * (hd / kv_q4_group(hd)) * 4;
      return {kivi_k_layout(bs, hd, 4).bytes, v};
    }
    case KvFormat::kKivi2: {
      const size_t v = kv_row_codes_bytes(bs, hd, 2) + size_t(4) * bs;
      return {kivi_k_layout(bs, hd, 2).bytes, v};
    }
  }
  OMNIBUS_CHECK(false && "not a KvFormat");
  return {};
}

const float* kivi_exp2_table() {
  static const auto* table = [] {
    auto* t = new float[256];
    for (int e = 0; e < 256; ++e) t[e] = std::exp2(-float(e) / 16.f);
    return t;
  }();
  return table;
}

// ---- q8 ----
void q8_store_row(uint8_t* unit, int bs, int hd, int row, const float* x) {
  const int g = kv_q8_group(hd), ng = hd / g;
  uint8_t* scales = unit + kv_row_codes_bytes(bs, hd, 8) + size_t(2) * row * ng;
  auto* q = reinterpret_cast<int8_t*>(unit + size_t(row) * hd);
  for (int gi = 0; gi < ng; ++gi) {
    const float* xg = x + gi * g;
    float amax = 0.f;
    for (int c = 0; c < g; ++c) amax = std::max(amax, std::fabs(xg[c]));
    st16(scales + 2 * gi, amax / 127.f);
    const float d = ld16(scales + 2 * gi);
    for (int c = 0; c < g; ++c) {
      q[gi * g + c] = d > 0.f
                          ? int8_t(std::clamp(static_cast<int>(std::lrint(xg[c] / d)), -127, 127))
                          : int8_t(0);
    }
  }
}

void q8_load_row(const uint8_t* unit, int bs, int hd, int row, float* y) {
  const int g = kv_q8_group(hd), ng = hd / g;
  const uint8_t* scales = unit + kv_row_codes_bytes(bs, hd, 8) + size_t(2) * row * ng;
  const auto* q = reinterpret_cast<const int8_t*>(unit + size_t(row) * hd);
  for (int c = 0; c < hd; ++c) y[c] = ld16(scales + 2 * (c / g)) * float(q[c]);
}

// ---- q4 ----
void q4_store_row(uint8_t* unit, int bs, int hd, int row, const float* x) {
  const int g = kv_q4_group(hd), ng = hd / g;
  uint8_t* codes = unit + size_t(row) * (hd / 2);
  uint8_t* dm = unit + kv_row_codes_bytes(bs, hd, 4) + size_t(row) * ng * 4;
  for (int gi = 0; gi < ng; ++gi) {
    const float* xg = x + gi * g;
    float lo, hi;
    minmax(xg, g, &lo, &hi);
    st16(dm + 4 * gi, (hi - lo) / 15.f);
    st16(dm + 4 * gi + 2, lo);
    const float d = ld16(dm + 4 * gi), m = ld16(dm + 4 * gi + 2);
    // A group is a 4-bit row of g channels: byte j = channel j | channel j + g/2.
    pack_row(codes + gi * (g / 2), g, 4, xg, &d, &m, false);
  }
}

void q4_load_row(const uint8_t* unit, int bs, int hd, int row, float* y) {
  const int g = kv_q4_group(hd), ng = hd / g;
  const uint8_t* codes = unit + size_t(row) * (hd / 2);
  const uint8_t* dm = unit + kv_row_codes_bytes(bs, hd, 4) + size_t(row) * ng * 4;
  for (int gi = 0; gi < ng; ++gi) {
    const float d = ld16(dm + 4 * gi), m = ld16(dm + 4 * gi + 2);
    const uint8_t* cg = codes + gi * (g / 2);
    for (int j = 0; j < g / 2; ++j) {
      y[gi * g + j] = m + d * float(cg[j] & 15);
      y[gi * g + j + g / 2] = m + d * float(cg[j] >> 4);
    }
  }
}

// ---- 2-bit per token ----
void q2_store_row(uint8_t* codes, uint16_t* dm, int hd, const float* x) {
  store_row_per_token(codes, dm, hd, 2, x, true);
}

void q2_load_row(const uint8_t* codes, const uint16_t* dm, int hd, float* y) {
  load_row_per_token(codes, dm, hd, 2, y);
}

// ---- kivi2 values ----
void kivi_v_store_row(uint8_t* unit, int bs, int hd, int row, const float* x) {
  auto* dm = reinterpret_cast<uint16_t*>(unit + kv_row_codes_bytes(bs, hd, 2));
  q2_store_row(unit + size_t(row) * (hd / 4), dm + 2 * row, hd, x);
}

void kivi_v_load_row(const uint8_t* unit, int bs, int hd, int row, float* y) {
  const auto* dm = reinterpret_cast<const uint16_t*>(unit + kv_row_codes_bytes(bs, hd, 2));
  q2_load_row(unit + size_t(row) * (hd / 4), dm + 2 * row, hd, y);
}

// ---- KIVI keys ----
void kivi_k_set_state(uint8_t* kunit, uint8_t state) { kunit[4] = state; }

void kivi_k_seal(uint8_t* kunit, int bs, int hd, int bits, const float* x) {
  const KiviKLayout l = kivi_k_layout(bs, hd, bits);
  const int max_level = (1 << bits) - 1;
  uint8_t* mstat = kunit + l.stats;
  uint8_t* estat = mstat + 2 * hd;
  float dcs[1024];
  OMNIBUS_CHECK(hd <= 1024);
  float smax = 0.f;
  float los[1024], his[1024];
  if (hd % 8 == 0 && cpu_features().use_avx2()) {
    kv_channel_minmax_avx2(x, bs, hd, los, his);  // the same values
  } else {
    for (int c = 0; c < hd; ++c) {
      los[c] = his[c] = x[c];
      for (int r = 1; r < bs; ++r) {
        los[c] = std::min(los[c], x[size_t(r) * hd + c]);
        his[c] = std::max(his[c], x[size_t(r) * hd + c]);
      }
    }
  }
  for (int c = 0; c < hd; ++c) {
    const float lo = los[c], hi = his[c];
    st16(mstat + 2 * c, lo);
    dcs[c] = (hi - lo) / float(max_level);
    smax = std::max(smax, dcs[c]);
  }
  std::memcpy(kunit, &smax, 4);
  for (int c = 0; c < hd; ++c) {
    // d_c rounded up to the table's next 1/16 octave below smax
    int e = 255;
    if (dcs[c] > 0.f && smax > 0.f)
      e = std::clamp(static_cast<int>(std::floor(-16.f * std::log2(dcs[c] / smax))), 0, 255);
    estat[c] = uint8_t(e);
  }
  kivi_k_set_state(kunit, kKiviSealed);
  float d[1024], m[1024];
  kivi_k_channel_stats(kunit, hd, d, m);  // the decoded stats, once for all rows
  for (int r = 0; r < bs; ++r)
    pack_row(kunit + l.codes + size_t(r) * (hd * bits / 8), hd, bits, x + size_t(r) * hd, d, m,
             true);
}

KiviKStats kivi_k_stats(const uint8_t* kunit, int hd) {
  KiviKStats s;
  std::memcpy(&s.smax, kunit, 4);
  s.m16 = kunit + 8;
  s.e = s.m16 + 2 * hd;
  return s;
}

void kivi_k_channel_stats(const uint8_t* kunit, int hd, float* d, float* m) {
  const KiviKStats s = kivi_k_stats(kunit, hd);
  const float* t = kivi_exp2_table();
  for (int c = 0; c < hd; ++c) {
    m[c] = ld16(s.m16 + 2 * c);
    d[c] = s.smax * t[s.e[c]];
  }
}

void kivi_k_store_row_sealed(uint8_t* kunit, int bs, int hd, int bits, int row, const float* x) {
  const KiviKLayout l = kivi_k_layout(bs, hd, bits);
  float d[1024], m[1024];
  OMNIBUS_CHECK(hd <= 1024);
  kivi_k_channel_stats(kunit, hd, d, m);
  pack_row(kunit + l.codes + size_t(row) * (hd * bits / 8), hd, bits, x, d, m, true);
}

void kivi_k_store_row_per_token(uint8_t* kunit, int bs, int hd, int bits, int row, const float* x) {
  const KiviKLayout l = kivi_k_layout(bs, hd, bits);
  auto* dm = reinterpret_cast<uint16_t*>(kunit + l.stats);
  store_row_per_token(kunit + l.codes + size_t(row) * (hd * bits / 8), dm + 2 * row, hd, bits, x,
                      false);
}

void kivi_k_load_row(const uint8_t* kunit, int bs, int hd, int bits, int row, float* y) {
  const KiviKLayout l = kivi_k_layout(bs, hd, bits);
  const uint8_t* codes = kunit + l.codes + size_t(row) * (hd * bits / 8);
  const uint8_t state = kivi_k_state(kunit);
  if (state == kKiviPerToken) {
    const auto* dm = reinterpret_cast<const uint16_t*>(kunit + l.stats);
    load_row_per_token(codes, dm + 2 * row, hd, bits, y);
    return;
  }
  OMNIBUS_DCHECK(state == kKiviSealed);
  float smax;
  std::memcpy(&smax, kunit, 4);
  const uint8_t* mstat = kunit + l.stats;
  const uint8_t* estat = mstat + 2 * hd;
  const float* t = kivi_exp2_table();
  for (int c = 0; c < hd; ++c)
    y[c] = ld16(mstat + 2 * c) + smax * t[estat[c]] * float(code_at(codes, hd, bits, c));
}

}  // namespace omnibus
