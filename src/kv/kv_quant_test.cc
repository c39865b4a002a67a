// KV formats: round-trip error bounds of each codec through kv_store, the
// value rotation and range of kivi2, the KIVI residual window of kivi2 and q4
// (fp16 reads of the open group, slot exhaustion, copy-on-write), and that a
// shared (prefix-cached) quantized block reads the same as a recomputed one.
#include "kv/kv_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"
#include "kv/attention.h"
#include "kv/attention_internal.h"
#include "kv/kv_quant_kivi.h"
#include "kv/kv_quant_paged.h"
#include "util/fp16.h"

namespace omnibus {
namespace {

constexpr int kHeads = 4, kKv = 2;

// A pool of n_blocks blocks in format t; block ids are used as given.
struct Pool {
  KvFormat t;
  int bs, hd;
  std::vector<uint8_t> k, v;
  KiviStaging staging;
  std::unique_ptr<KiviResidual> kivi;
  // window: fp16 window blocks of q4/kivi2 (-1: the format's default).
  Pool(KvFormat t_, int bs_, int hd_, int n_blocks, int slots = 16, int window = -1)
      : t(t_), bs(bs_), hd(hd_) {
    const KvUnitBytes u = kv_unit_bytes(t, bs, hd);
    k.assign(size_t(n_blocks) * kKv * u.k, 0xff);
    v.assign(size_t(n_blocks) * kKv * u.v, 0xff);
    if (kv_has_residual(t)) {
      kivi = std::make_unique<KiviResidual>(n_blocks, kKv, bs, hd, slots, &staging,
                                            window >= 0 ? window : kv_default_residual_blocks(t));
    }
  }
  PagedKvLayer layer() { return PagedKvLayer{t, k.data(), v.data(), bs, kKv, hd, kivi.get()}; }
};

std::vector<float> randn(size_t n, uint32_t seed, float outlier_every = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = d(rng);
  return x;
}

// Keys with a few outlier channels, as real keys have (the case KIVI's
// per-channel quantization is for).
std::vector<float> keys_with_outliers(int n_tok, int hd, uint32_t seed) {
  std::vector<float> x = randn(size_t(n_tok) * kKv * hd, seed);
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = int(i % size_t(hd));
    if (c % 16 == 3) x[i] = 8.f + x[i] * 0.5f;
  }
  return x;
}

void store(Pool& p, const std::vector<int32_t>& table, int n_past, int n_tok, const float* k,
           const float* v) {
  AttentionSeq s{0, n_tok, n_past, table.data(), 0};
  kv_store(p.layer(), &s, 1, k, v);
}

// x[from..] twice in a row: two sequences computing the same tokens in one step.
std::vector<float> tail_twice(const std::vector<float>& x, size_t from) {
  std::vector<float> y(x.begin() + ptrdiff_t(from), x.end());
  y.insert(y.end(), x.begin() + ptrdiff_t(from), x.end());
  return y;
}

// The two `seqs` compute the same tokens, from token `from` on, in one step:
// stores k and v of those tokens for both.
void store_tails_twice(Pool& p, const std::vector<AttentionSeq>& seqs, const std::vector<float>& k,
                       const std::vector<float>& v, int from) {
  const std::vector<float> ks = tail_twice(k, size_t(from) * kKv * p.hd);
  const std::vector<float> vs = tail_twice(v, size_t(from) * kKv * p.hd);
  kv_store(p.layer(), seqs.data(), 2, ks.data(), vs.data());
}

// Their attention output for the queries of those tokens: the first
// sequence's rows, then the second's.
std::vector<float> attend_tails_twice(Pool& p, const std::vector<AttentionSeq>& seqs,
                                      const std::vector<float>& q, int from,
                                      const AttentionParams& ap, ThreadPool& tp) {
  const std::vector<float> qs = tail_twice(q, size_t(from) * kHeads * p.hd);
  std::vector<float> out(qs.size());
  paged_attention(qs.data(), p.layer(), seqs.data(), 2, ap, out.data(), tp);
  return out;
}

std::string format_param_name(const ::testing::TestParamInfo<KvFormat>& pi) {
  return std::string(kv_format_name(pi.param));
}

// Round trip: every row read back (as a query far beyond sees it) is within
// the format's bound of what was stored.
class RoundTrip : public ::testing::TestWithParam<KvFormat> {};

TEST_P(RoundTrip, ErrorWithinFormatBound) {
  const KvFormat t = GetParam();
  for (int hd : {64, 24}) {
    const int bs = 16, n = 64;
    Pool p(t, bs, hd, 8);
    const std::vector<int32_t> table{5, 2, 7, 0, 1};
    const std::vector<float> k = keys_with_outliers(n, hd, 1), v = randn(size_t(n) * kKv * hd, 2);
    store(p, table, 0, n, k.data(), v.data());
    AttentionSeq s{0, 0, n, table.data(), 0};  // nothing new: every block read quantized
    std::vector<float> y(static_cast<size_t>(hd));
    const int kbits = kv_kivi_bits(t);
    double sum_sq = 0, sum_err = 0;
    for (bool is_v : {false, true}) {
      const std::vector<float>& x = is_v ? v : k;
      for (int j = 0; j < n; ++j) {
        for (int h = 0; h < kKv; ++h) {
          kv_read_row(p.layer(), s, is_v, j, h, n, y.data());
          std::vector<float> xr(&x[(size_t(j) * kKv + h) * hd],
                                &x[(size_t(j) * kKv + h) * hd] + hd);
          for (int c = 0; c < hd; ++c) {
            sum_sq += double(xr[c]) * xr[c];
            sum_err += double(y[c] - xr[c]) * (y[c] - xr[c]);
          }
          if (t == KvFormat::kQ8) {  // q8 rows are quantized rotated, K and V alike
            kv_hadamard(xr.data(), hd);
            kv_hadamard(y.data(), hd);
          }
          float glo = 0, ghi = 0;  // kivi2 V: the rotated row's range
          if (t == KvFormat::kKivi2 && is_v) {
            // compare in the rotated space, where the row was quantized
            kv_hadamard(xr.data(), hd);
            kv_hadamard(y.data(), hd);
            kv_gauss_range(xr.data(), hd, &glo, &ghi);
            EXPECT_LT(ghi - glo, *std::max_element(xr.begin(), xr.end()) -
                                     *std::min_element(xr.begin(), xr.end()));
          }
          float lo = xr[0], hi = xr[0], amax = 0;
          for (int c = 0; c < hd; ++c) {
            lo = std::min(lo, xr[c]);
            hi = std::max(hi, xr[c]);
            amax = std::max(amax, std::fabs(xr[c]));
          }
          for (int c = 0; c < hd; ++c) {
            float bound;
            if (t == KvFormat::kQ8) {
              bound = amax / 127.f * 0.5f * 1.01f + 1e-6f;
            } else if (!is_v && kbits != 0) {  // KIVI keys: per channel over the block's 16 tokens
              const int b0 = j / bs * bs;
              float clo = INFINITY, chi = -INFINITY;
              for (int r = b0; r < b0 + bs; ++r) {
                clo = std::min(clo, x[(size_t(r) * kKv + h) * hd + c]);
                chi = std::max(chi, x[(size_t(r) * kKv + h) * hd + c]);
              }
              bound = (chi - clo) / float((1 << kbits) - 1) * 0.5f * 1.05f +
                      std::fabs(clo) * 1e-3f + 1e-6f;
            } else if (t == KvFormat::kQ4) {  // q4 values: per token, groups of G channels
              const int g = kv_q4_group(hd), g0 = c / g * g;
              float qlo = xr[g0], qhi = xr[g0];
              for (int e = g0; e < g0 + g; ++e) {
                qlo = std::min(qlo, xr[e]);
                qhi = std::max(qhi, xr[e]);
              }
              bound = (qhi - qlo) / 15.f * 0.5f * 1.01f + std::fabs(qlo) * 1e-3f + 1e-6f;
            } else {  // kivi2 values (rotated): half a step inside the range, clamped beyond it
              bound = (ghi - glo) / 3.f * 0.5f * 1.01f + std::max({0.f, glo - xr[c], xr[c] - ghi}) +
                      (std::fabs(glo) + std::fabs(ghi)) * 1e-3f + 1e-5f;
            }
            ASSERT_LE(std::fabs(y[c] - xr[c]), bound)
                << kv_format_name(t) << " hd " << hd << (is_v ? " V" : " K") << " j " << j << " c "
                << c;
          }
        }
      }
    }
    // And the error is not trivially zero (the format does quantize).
    EXPECT_GT(sum_err, 0.0);
    EXPECT_LT(sum_err / sum_sq, t == KvFormat::kQ8 ? 1e-4 : t == KvFormat::kQ4 ? 5e-3 : 0.1);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, RoundTrip,
                         ::testing::Values(KvFormat::kQ8, KvFormat::kQ4, KvFormat::kKivi2),
                         format_param_name);

// The rotation: orthonormal (norm kept) and its own inverse; an outlier
// channel is spread over the block.
TEST(KvFormat, HadamardIsOrthonormalAndSelfInverse) {
  for (int hd : {64, 256, 24, 12}) {
    const std::vector<float> x = randn(size_t(hd), 3);
    std::vector<float> y = x;
    kv_hadamard(y.data(), hd);
    double nx = 0, ny = 0;
    for (int c = 0; c < hd; ++c) {
      nx += double(x[c]) * x[c];
      ny += double(y[c]) * y[c];
    }
    EXPECT_NEAR(nx, ny, 1e-4 * nx) << hd;
    EXPECT_GT(std::fabs(y[0] - x[0]), 1e-3f) << hd;  // it does move things
    kv_hadamard(y.data(), hd);
    for (int c = 0; c < hd; ++c) EXPECT_NEAR(y[c], x[c], 1e-5f) << hd;
  }
  // The AVX2 transform gives the scalar one's bits (same butterflies, same order).
  if (cpu_features().use_avx2()) {
    for (int hd : {64, 256, 24}) {
      const std::vector<float> x = randn(size_t(hd), 9);
      std::vector<float> a = x, b = x;
      int n = 1;
      while (n < 256 && hd % (2 * n) == 0) n *= 2;
      kv_hadamard_avx2(a.data(), hd, n);
      const float s = 1.f / std::sqrt(float(n));
      for (int o = 0; o < hd; o += n) {  // textbook scalar FWHT
        for (int len = 1; len < n; len *= 2) {
          for (int i = 0; i < n; i += 2 * len) {
            for (int j = i; j < i + len; ++j) {
              const float u = b[o + j], w = b[o + j + len];
              b[o + j] = u + w;
              b[o + j + len] = u - w;
            }
          }
        }
        for (int i = 0; i < n; ++i) b[o + i] *= s;
      }
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << hd;
    }
  }
  std::vector<float> spike(64, 0.f);
  spike[5] = 8.f;
  kv_hadamard(spike.data(), 64);
  for (float e : spike) EXPECT_FLOAT_EQ(std::fabs(e), 1.f);
}

// kivi2's value range: mu +- 1.5 sigma inside [min, max]; a constant row
// keeps its value.
TEST(KvFormat, GaussRangeIsThreeSigmaInsideMinMax) {
  const std::vector<float> x = randn(4096, 4);
  float lo, hi;
  kv_gauss_range(x.data(), 4096, &lo, &hi);
  EXPECT_NEAR(lo, -1.5f, 0.1f);  // N(0, 1)
  EXPECT_NEAR(hi, 1.5f, 0.1f);
  const std::vector<float> two{1.f, 3.f};  // sigma 1: mu +- 1.5 is beyond both
  kv_gauss_range(two.data(), 2, &lo, &hi);
  EXPECT_EQ(lo, 1.f);
  EXPECT_EQ(hi, 3.f);
  const std::vector<float> flat(8, 2.5f);
  kv_gauss_range(flat.data(), 8, &lo, &hi);
  EXPECT_EQ(lo, 2.5f);
  EXPECT_EQ(hi, 2.5f);
}

// The store-side AVX2 quantizers against the layout's definition, written
// out here: level = d > 0 ? clamp(round_even((x - m) / d), 0, 2^b - 1) : 0,
// byte j of a b-bit row holds channels j + k*q at bits b*k (q = hd*b/8).
// Rows hit exact ties, values outside [m, m + max*d], and d = 0.
TEST(KvFormat, AvxStoreQuantizersMatchTheDefinition) {
  if (!cpu_features().use_avx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 2.f);
  auto level = [](float x, float d, float m, int max_level) {
    if (!(d > 0.f)) return 0;
    return std::clamp(static_cast<int>(std::lrint((x - m) / d)), 0, max_level);
  };
  for (int bits : {2, 4}) {
    for (int hd : {64, 128, 256}) {
      const int per = 8 / bits, q = hd / per, max_level = (1 << bits) - 1;
      for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> x(static_cast<size_t>(hd)), d(x), m(x);
        for (int c = 0; c < hd; ++c) {
          m[size_t(c)] = nd(rng);
          d[size_t(c)] = trial % 7 == 0 && c % 5 == 0 ? 0.f : std::fabs(nd(rng)) / 4.f;
          const int kind = int(rng() % 4);
          const float t = kind == 0 ? float(int(rng() % 4)) + 0.5f  // an exact tie
                          : kind == 1
                              ? float(int(rng() % 9)) - 3.f  // beyond either end
                              : std::uniform_real_distribution<float>(0.f, float(max_level))(rng);
          x[size_t(c)] = m[size_t(c)] + t * d[size_t(c)];
        }
        for (bool per_channel : {true, false}) {
          std::vector<uint8_t> got(static_cast<size_t>(q)), want(static_cast<size_t>(q), 0);
          kv_pack_row_avx2(got.data(), hd, bits, x.data(), d.data(), m.data(), per_channel);
          for (int j = 0; j < q; ++j) {
            for (int k = 0; k < per; ++k) {
              const int c = j + k * q;
              const int e = per_channel ? c : 0;
              want[size_t(j)] =
                  uint8_t(want[size_t(j)] |
                          level(x[size_t(c)], d[size_t(e)], m[size_t(e)], max_level) << (bits * k));
            }
          }
          ASSERT_EQ(got, want) << bits << " bits, hd " << hd << ", per channel " << per_channel;
        }
        if (bits == 4) {  // q4 value groups of 32 against the row's first {d, m}
          for (int g = 0; g < hd / 32; ++g) {
            uint8_t got[16], want[16];
            kv_pack_row_avx2(got, 32, 4, x.data() + g * 32, &d[0], &m[0], false);
            for (int j = 0; j < 16; ++j) {
              want[j] = uint8_t(level(x[size_t(g * 32 + j)], d[0], m[0], 15) |
                                level(x[size_t(g * 32 + j + 16)], d[0], m[0], 15) << 4);
            }
            ASSERT_EQ(0, std::memcmp(got, want, 16)) << "hd " << hd << " group " << g;
          }
        }
        float lo, hi;
        kv_minmax_avx2(x.data(), hd, &lo, &hi);
        EXPECT_EQ(lo, *std::min_element(x.begin(), x.end()));
        EXPECT_EQ(hi, *std::max_element(x.begin(), x.end()));
      }
      // Per channel over 16 rows.
      std::vector<float> rows(static_cast<size_t>(16 * hd)), lo(static_cast<size_t>(hd)), hi(lo);
      for (float& v : rows) v = nd(rng);
      kv_channel_minmax_avx2(rows.data(), 16, hd, lo.data(), hi.data());
      for (int c = 0; c < hd; ++c) {
        float a = rows[size_t(c)], b = a;
        for (int r = 1; r < 16; ++r) {
          a = std::min(a, rows[size_t(r) * hd + c]);
          b = std::max(b, rows[size_t(r) * hd + c]);
        }
        ASSERT_EQ(lo[size_t(c)], a);
        ASSERT_EQ(hi[size_t(c)], b);
      }
    }
  }
}

TEST(KvFormat, BytesPerTokenAgainstF16) {
  const auto per_tok = [](KvFormat t) {
    const KvUnitBytes u = kv_unit_bytes(t, 16, 64);
    return double(u.k + u.v) / 16;
  };
  EXPECT_EQ(per_tok(KvFormat::kF16), 256);
  EXPECT_EQ(per_tok(KvFormat::kF32), 512);
  EXPECT_EQ(per_tok(KvFormat::kQ8), 136);  // 64 + 2 x 2 per row (q8_0's 34 / 32)
  // q4: V 32 + 2 x 4 per row; K 32 per row + (8 + 3 x 64) per block of 16
  EXPECT_EQ(per_tok(KvFormat::kQ4), 32 + 8 + 32 + 200 / 16.0);
  EXPECT_LE(per_tok(KvFormat::kKivi2), per_tok(KvFormat::kF16) / 5);
}

// KIVI formats: while a query's own group is open, its keys and values are
// read in fp16 exactly, so a context shorter than a block gives the f16
// pool's bits (q4); kivi2 reads its values rotated, H (H v), and rotates the
// output back, which equals the f16 pool's output up to float rounding.
TEST(Kivi, OpenGroupReadsExactFp16) {
  ThreadPool tp(2);
  const int hd = 64, bs = 16, n = 13;
  const std::vector<int32_t> table{3};
  const std::vector<float> q = randn(size_t(n) * kHeads * hd, 5),
                           k = randn(size_t(n) * kKv * hd, 6), v = randn(size_t(n) * kKv * hd, 7);
  const AttentionParams ap{kHeads, kKv, hd, 0.125f};
  std::vector<float> out[3];
  int i = 0;
  for (KvFormat t : {KvFormat::kF16, KvFormat::kQ4, KvFormat::kKivi2}) {
    Pool p(t, bs, hd, 4);
    // history in two earlier steps, then a 4-token chunk
    store(p, table, 0, 5, k.data(), v.data());
    store(p, table, 5, 4, k.data() + 5 * kKv * hd, v.data() + 5 * kKv * hd);
    AttentionSeq s{0, 4, 9, table.data(), 0};
    kv_store(p.layer(), &s, 1, k.data() + 9 * kKv * hd, v.data() + 9 * kKv * hd);
    out[i].resize(size_t(4) * kHeads * hd);
    paged_attention(q.data() + 9 * kHeads * hd, p.layer(), &s, 1, ap, out[i].data(), tp);
    ++i;
  }
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4));
  double max_diff = 0;
  for (size_t e = 0; e < out[0].size(); ++e)
    max_diff = std::max(max_diff, double(std::fabs(out[2][e] - out[0][e])));
  EXPECT_LT(max_diff, 2e-3);  // fp16 of H v against fp16 of v; 2 bits would be ~0.3
}

// With an fp16 window of one block, a query reads the group completed last in
// fp16 too: a context within its open group and the one before reads the f16
// pool's bits (q4 with window 1), or within fp16 rounding of the rotation
// (kivi2, default window 1); without the window the same context reads block
// 0 quantized and is visibly off.
TEST(Kivi, WindowReadsTheLastCompletedGroupInFp16) {
  ThreadPool tp(2);
  const int hd = 64, bs = 16, n = 27;
  const std::vector<int32_t> table{3, 1};
  const std::vector<float> q = randn(size_t(n) * kHeads * hd, 15),
                           k = keys_with_outliers(n, hd, 16), v = randn(size_t(n) * kKv * hd, 17);
  const AttentionParams ap{kHeads, kKv, hd, 0.125f};
  auto run = [&](KvFormat t, int window) {
    Pool p(t, bs, hd, 4, 16, window);
    // block 0 sealed in the second step (rows 0..6, then 7..20), then a 6-token chunk
    store(p, table, 0, 7, k.data(), v.data());
    store(p, table, 7, 14, k.data() + 7 * kKv * hd, v.data() + 7 * kKv * hd);
    AttentionSeq s{0, 6, 21, table.data(), 0};
    kv_store(p.layer(), &s, 1, k.data() + 21 * kKv * hd, v.data() + 21 * kKv * hd);
    std::vector<float> out(size_t(6) * kHeads * hd), ref(out.size());
    paged_attention(q.data() + 21 * kHeads * hd, p.layer(), &s, 1, ap, out.data(), tp);
    paged_attention_ref(q.data() + 21 * kHeads * hd, p.layer(), &s, 1, ap, ref.data());
    for (size_t e = 0; e < out.size(); ++e)
      EXPECT_NEAR(out[e], ref[e], 2e-5f * (1 + std::fabs(ref[e])));
    return out;
  };
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t e = 0; e < a.size(); ++e) m = std::max(m, double(std::fabs(a[e] - b[e])));
    return m;
  };
  const std::vector<float> f16 = run(KvFormat::kF16, 0);
  const std::vector<float> q4w = run(KvFormat::kQ4, 1);
  EXPECT_EQ(0, std::memcmp(f16.data(), q4w.data(), f16.size() * 4));
  EXPECT_LT(max_diff(run(KvFormat::kKivi2, -1), f16), 2e-3);  // the default window is 1
  EXPECT_GT(max_diff(run(KvFormat::kKivi2, 0), f16), 1e-2);   // block 0 read at 2 bits
  EXPECT_GT(max_diff(run(KvFormat::kQ4, 0), f16), 0.0);
}

// Decodes `n_seq` sequences one token per step for n steps with a pool of a
// KIVI format (kivi2, q4) of `slots` residual slots; returns every step's
// output and checks each against the reference.
std::vector<float> decode_many(KvFormat t, int slots, int n_seq, int n, uint64_t* steals) {
  ThreadPool tp(2);
  const int hd = 64, bs = 16;
  const int per = (n + bs - 1) / bs;
  Pool p(t, bs, hd, n_seq * per, slots);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seq));
  for (int i = 0; i < n_seq; ++i) {
    for (int b = 0; b < per; ++b) tables[size_t(i)].push_back(b * n_seq + i);
  }
  std::vector<std::vector<float>> q, k, v;
  for (int i = 0; i < n_seq; ++i) {
    q.push_back(randn(size_t(n) * kHeads * hd, 100 + i));
    k.push_back(keys_with_outliers(n, hd, 200 + i));
    v.push_back(randn(size_t(n) * kKv * hd, 300 + i));
  }
  const AttentionParams ap{kHeads, kKv, hd, 0.125f};
  std::vector<float> all;
  for (int pos = 0; pos < n; ++pos) {
    std::vector<AttentionSeq> seqs;
    std::vector<float> qs, ks, vs;
    for (int i = 0; i < n_seq; ++i) {
      seqs.push_back(AttentionSeq{i, 1, pos, tables[size_t(i)].data(), 0});
      qs.insert(qs.end(), q[size_t(i)].begin() + pos * kHeads * hd,
                q[size_t(i)].begin() + (pos + 1) * kHeads * hd);
      ks.insert(ks.end(), k[size_t(i)].begin() + pos * kKv * hd,
                k[size_t(i)].begin() + (pos + 1) * kKv * hd);
      vs.insert(vs.end(), v[size_t(i)].begin() + pos * kKv * hd,
                v[size_t(i)].begin() + (pos + 1) * kKv * hd);
    }
    kv_store(p.layer(), seqs.data(), n_seq, ks.data(), vs.data());
    std::vector<float> out(qs.size()), ref(qs.size());
    paged_attention(qs.data(), p.layer(), seqs.data(), n_seq, ap, out.data(), tp);
    paged_attention_ref(qs.data(), p.layer(), seqs.data(), n_seq, ap, ref.data());
    for (size_t e = 0; e < out.size(); ++e) {
      EXPECT_TRUE(std::isfinite(out[e]));
      EXPECT_NEAR(out[e], ref[e], 2e-5f * (1 + std::fabs(ref[e])));
    }
    all.insert(all.end(), out.begin(), out.end());
  }
  *steals = p.kivi->n_steals() + p.kivi->n_no_slot();
  return all;
}

// Fewer residual slots than open groups: slots are stolen (keys of the victim
// block fall back to per-token quantization), reads still match the reference.
TEST(Kivi, SlotExhaustionDegradesButStaysConsistent) {
  for (KvFormat t : {KvFormat::kKivi2, KvFormat::kQ4}) {
    uint64_t steals_enough = 0, steals_short = 0;
    const std::vector<float> enough = decode_many(t, 8, 4, 40, &steals_enough);
    const std::vector<float> shortage = decode_many(t, 2, 4, 40, &steals_short);
    EXPECT_EQ(steals_enough, 0u) << kv_format_name(t);
    EXPECT_GT(steals_short, 0u) << kv_format_name(t);
    EXPECT_NE(0, std::memcmp(enough.data(), shortage.data(), enough.size() * 4))
        << kv_format_name(t);
  }
}

// Copy-on-write of an open kivi2/q4 block (a fork mid-group): the copy
// carries the residual rows, so the forked sequence reads exactly what a
// sequence that computed the same tokens itself reads.
class KiviFormats : public ::testing::TestWithParam<KvFormat> {};

TEST_P(KiviFormats, CopyOfOpenBlockMatchesRecompute) {
  const KvFormat t = GetParam();
  ThreadPool tp(2);
  const int hd = 64, bs = 16, n = 21;
  const std::vector<float> q = randn(size_t(n + 1) * kHeads * hd, 8);
  const std::vector<float> k = keys_with_outliers(n + 1, hd, 9),
                           v = randn(size_t(n + 1) * kKv * hd, 10);
  const AttentionParams ap{kHeads, kKv, hd, 0.125f};
  Pool p(t, bs, hd, 8);
  const std::vector<int32_t> a{0, 1}, forked{0, 2}, fresh{3, 4};
  store(p, a, 0, n, k.data(), v.data());
  store(p, fresh, 0, n, k.data(), v.data());
  // fork: block 1 (rows 16..20 open) copied to block 2, as KvStorage::copy_block does
  const KvUnitBytes u = kv_unit_bytes(t, bs, hd);
  std::memcpy(p.k.data() + 2 * kKv * u.k, p.k.data() + 1 * kKv * u.k, kKv * u.k);
  std::memcpy(p.v.data() + 2 * kKv * u.v, p.v.data() + 1 * kKv * u.v, kKv * u.v);
  kivi_copy_block(p.layer(), 1, 2);
  ASSERT_GE(p.kivi->slot_of(2), 0);
  ASSERT_NE(p.kivi->slot_of(2), p.kivi->slot_of(1));
  std::vector<AttentionSeq> seqs{AttentionSeq{0, 1, n, forked.data(), 0},
                                 AttentionSeq{1, 1, n, fresh.data(), 0}};
  store_tails_twice(p, seqs, k, v, n);
  const std::vector<float> out = attend_tails_twice(p, seqs, q, n, ap, tp);
  const size_t row = size_t(kHeads) * hd;
  EXPECT_EQ(0, std::memcmp(out.data(), out.data() + row, row * 4));
}

INSTANTIATE_TEST_SUITE_P(Formats, KiviFormats, ::testing::Values(KvFormat::kKivi2, KvFormat::kQ4),
                         format_param_name);

// Prefix caching: a sequence whose first blocks are another sequence's
// (shared, already quantized) blocks gets the same bits as one that computed
// those tokens into its own blocks.
class SharedBlocks : public ::testing::TestWithParam<KvFormat> {};

TEST_P(SharedBlocks, CacheHitEqualsRecompute) {
  const KvFormat t = GetParam();
  ThreadPool tp(2);
  const int hd = 64, bs = 16, n_prefix = 32, n = 45;
  const std::vector<float> q = randn(size_t(n) * kHeads * hd, 11);
  const std::vector<float> k = keys_with_outliers(n, hd, 12), v = randn(size_t(n) * kKv * hd, 13);
  const AttentionParams ap{kHeads, kKv, hd, 0.125f};
  Pool p(t, bs, hd, 8);
  const std::vector<int32_t> owner{0, 1, 2}, hit{0, 1, 3}, recompute{4, 5, 6};
  store(p, owner, 0, n_prefix + 3, k.data(), v.data());  // the cached prefix's first user
  store(p, recompute, 0, n_prefix, k.data(), v.data());
  // Both now process the rest of the prompt in one chunk.
  const int m = n - n_prefix;
  std::vector<AttentionSeq> seqs{AttentionSeq{0, m, n_prefix, hit.data(), 0},
                                 AttentionSeq{m, m, n_prefix, recompute.data(), 0}};
  store_tails_twice(p, seqs, k, v, n_prefix);
  const std::vector<float> out = attend_tails_twice(p, seqs, q, n_prefix, ap, tp);
  const size_t rows = size_t(m) * kHeads * hd;
  EXPECT_EQ(0, std::memcmp(out.data(), out.data() + rows, rows * 4));
  // Reading the shared blocks again gives the same bits too.
  const std::vector<float> again = attend_tails_twice(p, seqs, q, n_prefix, ap, tp);
  EXPECT_EQ(0, std::memcmp(out.data(), again.data(), out.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(Formats, SharedBlocks,
                         ::testing::Values(KvFormat::kF16, KvFormat::kQ8, KvFormat::kQ4,
                                           KvFormat::kKivi2),
                         format_param_name);

}  // namespace
}  // namespace omnibus
