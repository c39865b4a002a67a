#include "gguf/gguf_fingerprint.h"

// Inlined: the gguf module does not link libxxhash (kv does).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>

namespace omnibus {

uint64_t gguf_fingerprint(const GgufFile& file) {
  constexpr size_t kSample = 4096;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const uint64_t size = file.file_size();
  XXH3_64bits_update(st, &size, sizeof(size));
  const std::vector<GgufTensor>& tensors = file.tensors();
  if (!tensors.empty()) {
    // The mapping's start, from any tensor's address and absolute offset.
    const auto* base = static_cast<const uint8_t*>(tensors[0].data) - tensors[0].file_offset;
    XXH3_64bits_update(st, base, size_t(file.data_offset()));
  }
  for (const GgufTensor& t : tensors) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    const size_t head = std::min(t.n_bytes, kSample);
    XXH3_64bits_update(st, p, head);
    if (t.n_bytes > head) {
      const size_t tail = std::min(t.n_bytes - head, kSample);
      XXH3_64bits_update(st, p + t.n_bytes - tail, tail);
    }
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace omnibus
