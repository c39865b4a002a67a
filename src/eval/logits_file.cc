#include "eval/logits_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "util/check.h"

namespace omnibus::eval {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

// llama.cpp's nearest_int: round to nearest, ties to even, via the float
// mantissa (valid for |x| < 2^22).
int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace

int64_t row_words(int32_t n_vocab) { return 2 * ((int64_t(n_vocab) + 1) / 2) + 4; }

int32_t rows_per_chunk(int32_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }

void encode_row(std::span<const float> logits, std::span<uint16_t> row) {
  const int32_t n = int32_t(logits.size());
  OMNIBUS_CHECK(n > 0 && int64_t(row.size()) == row_words(n));
  float max_logit = logits[0], min_logit = logits[0];
  for (int32_t i = 1; i < n; ++i) {
    max_logit = std::max(max_logit, logits[size_t(i)]);
    min_logit = std::min(min_logit, logits[size_t(i)]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int32_t i = 0; i < n; ++i) sum_exp += std::exp(logits[size_t(i)] - max_logit);
  const float log_sum_exp = float(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(row.data(), &scale, sizeof scale);
  std::memcpy(row.data() + 2, &min_log_prob, sizeof min_log_prob);
  uint16_t* q = row.data() + 4;
  std::fill(q, row.data() + row.size(), uint16_t(0));
  if (scale != 0) {
    const float inv_scale = 1 / scale;
    for (int32_t i = 0; i < n; ++i) {
      const float l = logits[size_t(i)];
      q[i] = l > min_logit ? uint16_t(nearest_int(inv_scale * (l - min_logit))) : 0;
    }
  }
}

// ---------------------------------------------------------------- reader

LogitsFileReader::LogitsFileReader(LogitsFileReader&& o) noexcept
    : path_(std::move(o.path_)),
      f_(std::exchange(o.f_, nullptr)),
      h_(o.h_),
      tokens_(std::move(o.tokens_)),
      rows_offset_(o.rows_offset_) {}

LogitsFileReader& LogitsFileReader::operator=(LogitsFileReader&& o) noexcept {
  if (this != &o) {
    if (f_ != nullptr) std::fclose(f_);
    path_ = std::move(o.path_);
    f_ = std::exchange(o.f_, nullptr);
    h_ = o.h_;
    tokens_ = std::move(o.tokens_);
    rows_offset_ = o.rows_offset_;
  }
  return *this;
}

LogitsFileReader::~LogitsFileReader() {
  if (f_ != nullptr) std::fclose(f_);
}

StatusOr<LogitsFileReader> LogitsFileReader::open(const std::string& path) {
  LogitsFileReader r;
  r.path_ = path;
  r.f_ = std::fopen(path.c_str(), "rb");
  if (r.f_ == nullptr) return Status::not_found("cannot open logits file '{}'", path);
  char magic[8];
  int32_t h[3];
  if (std::fread(magic, 1, 8, r.f_) != 8 || std::memcmp(magic, kMagic, 8) != 0) {
    return Status::corrupt("'{}' is not a llama-perplexity logits file (no '_logits_' magic)",
                           path);
  }
  if (std::fread(h, sizeof(int32_t), 3, r.f_) != 3) {
    return Status::corrupt("'{}': truncated header", path);
  }
  r.h_ = {h[0], h[1], h[2]};
  if (r.h_.n_ctx < 8 || r.h_.n_ctx > (1 << 22) || r.h_.n_vocab < 2 || r.h_.n_vocab > (1 << 24) ||
      r.h_.n_chunk < 1 || r.h_.n_chunk > (1 << 20)) {
    return Status::corrupt("'{}': header out of range (n_ctx {}, n_vocab {}, n_chunk {})", path,
                           r.h_.n_ctx, r.h_.n_vocab, r.h_.n_chunk);
  }
  const int64_t n_tokens = int64_t(r.h_.n_ctx) * r.h_.n_chunk;
  r.tokens_.resize(size_t(n_tokens));
  if (std::fread(r.tokens_.data(), sizeof(int32_t), size_t(n_tokens), r.f_) != size_t(n_tokens)) {
    return Status::corrupt("'{}': truncated token list ({} tokens expected)", path, n_tokens);
  }
  for (int32_t t : r.tokens_) {
    if (t < 0 || t >= r.h_.n_vocab) {
      return Status::corrupt("'{}': token id {} outside the vocabulary of {}", path, t,
                             r.h_.n_vocab);
    }
  }
  r.rows_offset_ = 8 + 3 * 4 + n_tokens * 4;
  const int64_t want = r.rows_offset_ + int64_t(r.h_.n_chunk) * rows_per_chunk(r.h_.n_ctx) *
                                            row_words(r.h_.n_vocab) * 2;
  if (std::fseek(r.f_, 0, SEEK_END) != 0 || std::ftell(r.f_) < want) {
    return Status::corrupt("'{}': {} bytes, its header needs {}", path, std::ftell(r.f_), want);
  }
  return r;
}

Status LogitsFileReader::read_chunk(int32_t c, std::vector<uint16_t>* rows) {
  OMNIBUS_CHECK(c >= 0 && c < h_.n_chunk);
  const int64_t words = int64_t(rows_per_chunk(h_.n_ctx)) * row_words(h_.n_vocab);
  rows->resize(size_t(words));
  if (std::fseek(f_, long(rows_offset_ + int64_t(c) * words * 2), SEEK_SET) != 0 ||
      std::fread(rows->data(), 2, size_t(words), f_) != size_t(words)) {
    return Status::io("'{}': cannot read chunk {}", path_, c);
  }
  return Status::ok();
}

// ---------------------------------------------------------------- writer

LogitsFileWriter::LogitsFileWriter(LogitsFileWriter&& o) noexcept
    : path_(std::move(o.path_)), f_(std::exchange(o.f_, nullptr)) {}

LogitsFileWriter& LogitsFileWriter::operator=(LogitsFileWriter&& o) noexcept {
  if (this != &o) {
    if (f_ != nullptr) std::fclose(f_);
    path_ = std::move(o.path_);
    f_ = std::exchange(o.f_, nullptr);
  }
  return *this;
}

LogitsFileWriter::~LogitsFileWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

StatusOr<LogitsFileWriter> LogitsFileWriter::create(const std::string& path,
                                                    const LogitsFileHeader& h,
                                                    std::span<const int32_t> tokens) {
  OMNIBUS_CHECK(int64_t(tokens.size()) == int64_t(h.n_ctx) * h.n_chunk);
  LogitsFileWriter w;
  w.path_ = path;
  w.f_ = std::fopen(path.c_str(), "wb");
  if (w.f_ == nullptr) return Status::io("cannot create logits file '{}'", path);
  const int32_t hdr[3] = {h.n_ctx, h.n_vocab, h.n_chunk};
  if (std::fwrite(kMagic, 1, 8, w.f_) != 8 || std::fwrite(hdr, 4, 3, w.f_) != 3 ||
      std::fwrite(tokens.data(), 4, tokens.size(), w.f_) != tokens.size()) {
    return Status::io("cannot write '{}'", path);
  }
  return w;
}

Status LogitsFileWriter::write_chunk(std::span<const uint16_t> rows) {
  OMNIBUS_CHECK(f_ != nullptr);
  if (std::fwrite(rows.data(), 2, rows.size(), f_) != rows.size()) {
    return Status::io("cannot write '{}' (disk full?)", path_);
  }
  return Status::ok();
}

Status LogitsFileWriter::close() {
  if (f_ == nullptr) return Status::ok();
  const bool ok = std::fflush(f_) == 0 && std::ferror(f_) == 0;
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) return Status::io("cannot finish writing '{}' (disk full?)", path_);
  return Status::ok();
}

}  // namespace omnibus::eval
