// The logits file of llama.cpp's `llama-perplexity --kl-divergence-base FILE`
// (tools/perplexity/perplexity.cpp), read and written byte for byte, so that
// omnibus can be compared against llama.cpp's distributions and llama.cpp
// against omnibus's:
//
//   "_logits_"                        8 bytes
//   n_ctx, n_vocab, n_chunk           3 x int32 (little-endian)
//   tokens                            n_chunk * n_ctx x int32: the evaluated text
//                                     (BOS substitution not applied)
//   per chunk, per scored position p in [n_ctx/2, n_ctx - 2] (the logits at
//   p, which score token p + 1): one row of row_words(n_vocab) uint16:
//     float scale, float min_log_prob  (the first 4 uint16)
//     q[i] = round((logit[i] - min_logit) / scale) for logit[i] > min_logit,
//            else 0; min_logit = max(min logit, max logit - 16),
//            scale = (max_logit - min_logit) / 65535
//   so log p[i] = scale * q[i] + min_log_prob (log-probabilities below
//   max - 16 are clamped there).
//
// Thread-safety: value types and pure functions; a LogitsFile* object is used
// by one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"

namespace omnibus::eval {

struct LogitsFileHeader {
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
};

// uint16 words per row: 2 * ceil(n_vocab / 2) + 4 (two floats, then the
// quantized log-probabilities, padded to an even count).
int64_t row_words(int32_t n_vocab);
// Scored rows per chunk: n_ctx - 1 - n_ctx / 2.
int32_t rows_per_chunk(int32_t n_ctx);

// Encodes one row of logits as llama.cpp does (its log_softmax(n_vocab,
// logits, log_prob, tok)). row: [row_words(n_vocab)].
void encode_row(std::span<const float> logits, std::span<uint16_t> row);
// The log-probability of token i in an encoded row.
inline float row_log_prob(std::span<const uint16_t> row, int32_t i);

// Reads a file: the header and tokens on open(), then the rows chunk by chunk.
class LogitsFileReader {
 public:
  // Fails (naming the file) when it cannot be read, lacks the magic, has a
  // header out of range, or is shorter than its header says.
  static StatusOr<LogitsFileReader> open(const std::string& path);

  const LogitsFileHeader& header() const { return h_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // [n_chunk * n_ctx]
  // Chunk c's rows, [rows_per_chunk * row_words] (chunks in any order).
  Status read_chunk(int32_t c, std::vector<uint16_t>* rows);

  LogitsFileReader(LogitsFileReader&&) noexcept;
  LogitsFileReader& operator=(LogitsFileReader&&) noexcept;
  ~LogitsFileReader();

 private:
  LogitsFileReader() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  LogitsFileHeader h_;
  std::vector<int32_t> tokens_;
  int64_t rows_offset_ = 0;
};

// Writes a file: the header and tokens on create(), then chunks in order.
class LogitsFileWriter {
 public:
  static StatusOr<LogitsFileWriter> create(const std::string& path, const LogitsFileHeader& h,
                                           std::span<const int32_t> tokens);
  // rows: [rows_per_chunk * row_words]; chunks must come in order 0, 1, ...
  Status write_chunk(std::span<const uint16_t> rows);
  // Flushes and closes; an error if anything failed (a full disk).
  Status close();

  LogitsFileWriter(LogitsFileWriter&&) noexcept;
  LogitsFileWriter& operator=(LogitsFileWriter&&) noexcept;
  ~LogitsFileWriter();

 private:
  LogitsFileWriter() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
};

inline float row_log_prob(std::span<const uint16_t> row, int32_t i) {
  float scale, min_log_prob;
  static_assert(sizeof(float) == 2 * sizeof(uint16_t));
  std::memcpy(&scale, row.data(), sizeof scale);
  std::memcpy(&min_log_prob, row.data() + 2, sizeof min_log_prob);
  return scale * float(row[size_t(i) + 4]) + min_log_prob;
}

}  // namespace omnibus::eval
