// A terminal progress bar for model loading and long benchmarks, drawn on
// stderr. On a terminal it redraws one line in place; when stderr is not a
// terminal (logs, CI) it prints a line at every 25% instead.
//
// Thread-safety: one thread updates a bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace omnibus {

class ProgressBar {
 public:
  // `unit` labels the numbers ("MiB", "requests", "chunks"); `scale` divides
  // raw counts for display (e.g. 1 << 20 for bytes shown as MiB).
  ProgressBar(std::string label, uint64_t total, std::string unit = "", double scale = 1.0);
  ~ProgressBar();  // finishes the line if update() left it open

  void update(uint64_t done);
  // For callers that learn the total only while working (e.g. loaders).
  void update(uint64_t done, uint64_t total) {
    total_ = total;
    update(done);
  }
  void finish();

 private:
  void draw(uint64_t done);
  const std::string label_;
  uint64_t total_;
  const std::string unit_;
  const double scale_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
  int last_quarter_ = -1;
  bool finished_ = false;
};

}  // namespace omnibus
