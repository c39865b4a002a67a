#include "kv/kv_cache_size.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace omnibus {

StatusOr<int64_t> parse_byte_size(std::string_view text) {
  const std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  std::string unit = s.substr(i);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1) {
    return Status::invalid_argument("'{}' is not a size (examples: 2GiB, 512MiB, 1000000)", text);
  }
  double scale;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else {
    return Status::invalid_argument("unknown size unit '{}' in '{}' (use B, KiB, MiB, GiB, KB, MB, GB)",
                                    unit, text);
  }
  const double bytes = std::stod(number) * scale;
  if (!(bytes >= 1) || bytes > 9e18) return Status::invalid_argument("size '{}' is out of range", text);
  return int64_t(std::llround(bytes));
}

int64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  int64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

int64_t default_kv_cache_bytes() {
  const int64_t avail = available_memory_bytes();
  if (avail <= 0) return int64_t(1) << 30;
  return std::clamp(int64_t(double(avail) * 0.3), int64_t(64) << 20, int64_t(4) << 30);
}

}  // namespace omnibus
