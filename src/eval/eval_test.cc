// llama-perplexity's logits file (eval/logits_file.h) and the KL divergence
// statistics (eval/kl_divergence.h): rows decode to the log-softmax they
// encode; files round-trip and corrupt ones are refused with a reason; KL
// divergence matches the formula on hand-made distributions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "eval/kl_divergence.h"
#include "eval/logits_file.h"

namespace omnibus::eval {
namespace {

std::vector<float> random_logits(int n, uint64_t seed, float scale = 3.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

std::vector<double> log_softmax(const std::vector<float>& l) {
  double mx = l[0];
  for (float x : l) mx = std::max(mx, double(x));
  double s = 0;
  for (float x : l) s += std::exp(x - mx);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - mx - std::log(s);
  return out;
}

TEST(LogitsFile, RowWordsAndRowsPerChunk) {
  EXPECT_EQ(row_words(5), 10);  // 2 * 3 + 4
  EXPECT_EQ(row_words(6), 10);
  EXPECT_EQ(rows_per_chunk(512), 255);
  EXPECT_EQ(rows_per_chunk(9), 4);
}

TEST(LogitsFile, RowsDecodeToTheirLogSoftmax) {
  for (int n : {2, 7, 1000, 4097}) {
    const std::vector<float> l = random_logits(n, uint64_t(n));
    std::vector<uint16_t> row(static_cast<size_t>(row_words(n)));
    encode_row(l, row);
    const std::vector<double> want = log_softmax(l);
    const double top = *std::max_element(want.begin(), want.end());
    float scale;
    std::memcpy(&scale, row.data(), sizeof scale);
    for (int i = 0; i < n; ++i) {
      const double w = std::max(want[size_t(i)], top - 16);  // clamped 16 below the top
      ASSERT_NEAR(row_log_prob(row, i), w, scale * 0.51 + 1e-5) << "n " << n << " i " << i;
    }
  }
}

TEST(LogitsFile, WritesAndReadsBack) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "omnibus_logits_test.kld").string();
  const LogitsFileHeader h{16, 11, 3};
  std::vector<int32_t> tokens(16 * 3);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i % 11);
  const int64_t words = rows_per_chunk(16) * row_words(11);
  {
    auto w = LogitsFileWriter::create(path, h, tokens);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    for (int c = 0; c < 3; ++c) {
      std::vector<uint16_t> rows(static_cast<size_t>(words), uint16_t(100 + c));
      ASSERT_TRUE(w->write_chunk(rows).is_ok());
    }
    ASSERT_TRUE(w->close().is_ok());
  }
  auto r = LogitsFileReader::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->header().n_ctx, 16);
  EXPECT_EQ(r->header().n_vocab, 11);
  EXPECT_EQ(r->header().n_chunk, 3);
  EXPECT_EQ(r->tokens(), tokens);
  std::vector<uint16_t> rows;
  ASSERT_TRUE(r->read_chunk(2, &rows).is_ok());
  ASSERT_EQ(int64_t(rows.size()), words);
  EXPECT_EQ(rows.front(), 102);
  ASSERT_TRUE(r->read_chunk(0, &rows).is_ok());
  EXPECT_EQ(rows.back(), 100);

  // Corrupt versions of the same file.
  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto refused = [&](std::string bytes, const std::string& why) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto bad = LogitsFileReader::open(path);
    ASSERT_FALSE(bad.is_ok()) << why;
    EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().to_string();
  };
  refused("_logitz_" + good.substr(8), "magic");
  refused(good.substr(0, good.size() - 1), "truncated rows");
  refused(good.substr(0, 30), "truncated tokens");
  std::string big_vocab = good;
  big_vocab[12] = '\xff';  // n_vocab's low byte: ids stay valid, the rows no longer fit
  refused(big_vocab, "rows shorter than the header says");
  std::string bad_token = good;
  bad_token[20] = 42;  // token 0 = 42 >= n_vocab 11
  refused(bad_token, "token out of range");
  std::string zero_chunks = good;
  zero_chunks[16] = 0;
  refused(zero_chunks, "no chunks");
  EXPECT_FALSE(LogitsFileReader::open(path + ".missing").is_ok());
  std::filesystem::remove(path);
}

TEST(KlDivergence, MatchesTheFormula) {
  // base p = (1/4, 3/4), candidate q = (1/2, 1/2):
  // KL(p || q) = 1/4 ln(1/2) + 3/4 ln(3/2)
  std::vector<uint16_t> base(static_cast<size_t>(row_words(2)));
  encode_row(std::vector<float>{0.f, std::log(3.f)}, base);
  const KldRow r = kld_row(std::vector<float>{5.f, 5.f}, base, 1);
  EXPECT_NEAR(r.kld, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-4);
  EXPECT_NEAR(r.nll, std::log(2.0), 1e-6);
  EXPECT_NEAR(r.nll_base, -std::log(0.75), 1e-4);
  EXPECT_NEAR(r.p_diff, 0.5 - 0.75, 1e-4);
  EXPECT_FALSE(r.same_top);  // the candidate's argmax is 0 (the first of a tie), the base's 1
}

TEST(KlDivergence, ZeroAgainstItselfAndSummaries) {
  KlDivergence kld;
  const int n = 3000;
  for (int t = 0; t < 200; ++t) {
    // spread 2: every logit within 16 of the top, so no target's log-prob is clamped
    const std::vector<float> l = random_logits(n, 100 + uint64_t(t), 2.f);
    std::vector<uint16_t> row(static_cast<size_t>(row_words(n)));
    encode_row(l, row);
    kld.add(kld_row(l, row, t % n));
  }
  const KlDivergence::Summary s = kld.summary();
  EXPECT_LT(std::abs(s.kld_mean), 1e-5);  // only the 16-bit encoding's rounding
  EXPECT_EQ(s.same_top, 1.0);
  EXPECT_NEAR(s.ppl_ratio, 1.0, 1e-4);
  EXPECT_LE(s.kld_min, s.kld_median);
  EXPECT_LE(s.kld_median, s.kld_99);
  EXPECT_LE(s.kld_99, s.kld_max);
  const std::string report = KlDivergence::format(s);
  EXPECT_NE(report.find("Mean    KLD:"), std::string::npos);
  EXPECT_NE(report.find("Same top p:"), std::string::npos);
}

TEST(KlDivergence, GrowsWithTheDifference) {
  double last = -1;
  for (float noise : {0.01f, 0.1f, 0.5f}) {
    KlDivergence kld;
    for (int t = 0; t < 100; ++t) {
      const std::vector<float> l = random_logits(500, 7 + uint64_t(t));
      std::vector<uint16_t> row(static_cast<size_t>(row_words(500)));
      encode_row(l, row);
      std::vector<float> q = l;
      const std::vector<float> eps = random_logits(500, 9000 + uint64_t(t), noise);
      for (size_t i = 0; i < q.size(); ++i) q[i] += eps[i];
      kld.add(kld_row(q, row, t));
    }
    const double mean = kld.summary().kld_mean;
    EXPECT_GT(mean, last);
    last = mean;
  }
}

}  // namespace
}  // namespace omnibus::eval
