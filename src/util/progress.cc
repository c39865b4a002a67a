#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace omnibus {

ProgressBar::ProgressBar(std::string label, uint64_t total, std::string unit, double scale)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      scale_(scale),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (!finished_ && last_quarter_ >= 0) finish();
}

void ProgressBar::update(uint64_t done) {
  if (finished_) return;
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(50)) return;
    last_draw_ = now;
    draw(done);
  } else {
    const int quarter = total_ == 0 ? 4 : int(done * 4 / total_);
    if (quarter != last_quarter_) draw(done);
    last_quarter_ = quarter;
  }
  if (tty_) last_quarter_ = 0;
  if (done >= total_) finish();
}

void ProgressBar::draw(uint64_t done) {
  const double frac = total_ == 0 ? 1.0 : double(done) / double(total_);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  constexpr int kWidth = 30;
  char bar[kWidth + 1];
  const int filled = int(frac * kWidth + 0.5);
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  std::fprintf(stderr, "%s%s [%s] %3.0f%% %.1f/%.1f %s %.1fs%s", tty_ ? "\r" : "", label_.c_str(),
               bar, frac * 100.0, double(done) / scale_, double(total_) / scale_, unit_.c_str(),
               secs, tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) {
    draw(total_);
    std::fputc('\n', stderr);
  } else if (last_quarter_ != 4) {
    draw(total_);
  }
}

}  // namespace omnibus
