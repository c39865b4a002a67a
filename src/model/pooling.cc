#include "model/pooling.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/check.h"

namespace omnibus {

void pool_rows(PoolingType p, const float* h, int64_t n_tok, int64_t n_embd, float* out) {
  OMNIBUS_CHECK(n_tok >= 1);
  switch (p) {
    case PoolingType::kCls:
      std::copy(h, h + n_embd, out);
      return;
    case PoolingType::kLast:
      std::copy(h + (n_tok - 1) * n_embd, h + n_tok * n_embd, out);
      return;
    case PoolingType::kMean:
      for (int64_t i = 0; i < n_embd; ++i) {
        double s = 0;
        for (int64_t t = 0; t < n_tok; ++t) s += h[t * n_embd + i];
        out[i] = float(s / double(n_tok));
      }
      return;
    default:
      OMNIBUS_CHECK(false && "pool_rows: pooling must be mean, cls or last");
  }
}

void l2_normalize(std::span<float> v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  if (s <= 0) return;
  const float inv = float(1.0 / std::sqrt(s));
  for (float& x : v) x *= inv;
}

}  // namespace omnibus
