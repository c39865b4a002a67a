// Sizing the KV cache pool: parsing `--kv-cache-memory` and, when it is not
// given, deriving a size from the memory the machine has available.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string_view>

#include "util/status.h"

namespace omnibus {

// "2GiB", "512MiB", "64KiB", "1.5GiB", "2G" (= GiB), "3GB" (= 10^9), "1000000"
// (plain bytes). Case-insensitive units. kInvalidArgument otherwise.
StatusOr<int64_t> parse_byte_size(std::string_view text);

// MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read.
int64_t available_memory_bytes();

// The default pool size: 30% of the available memory, at most 4 GiB and at
// least 64 MiB (or 1 GiB when the available memory is unknown).
int64_t default_kv_cache_bytes();

}  // namespace omnibus
