// Sizing the KV cache: parsing `--kv-cache-memory`, deriving a size from the
// memory the machine has available when it is not given, and planning the
// pool (blocks, q4/kivi2 residual slots, the sequence cap and the context
// length) for a model's KV geometry (plan_kv_cache).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string_view>

#include "kv/kv_storage.h"
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

// q4/kivi2: running sequences the residual slots are sized for whatever the
// pool (within half of it); more only in pools where they take <= 1/8.
inline constexpr int64_t kResidualSeqsAlways = 64;

// What the pool is sized from (the engine's flags and the model).
struct KvCacheLimits {
  int64_t kv_cache_bytes = 0;  // --kv-cache-memory; 0: default_bytes
  int64_t default_bytes = 0;   // the budget when kv_cache_bytes is 0; 0: default_kv_cache_bytes()
  int32_t max_num_seqs = 256;  // --max-num-seqs
  int32_t max_model_len = 0;   // --max-model-len; 0: n_ctx_train capped to the pool
  int32_t n_ctx_train = 0;     // the model's training context; 0: unknown
  bool allow_beyond_n_ctx_train = false;  // max_model_len may exceed n_ctx_train
  // Sliding-window KV (kv/kv_layer_groups.h): a sequence holds
  // groups->blocks_per_seq blocks rather than one per block_size tokens.
  // nullptr: the uniform layout. Must outlive the plan_kv_cache call.
  const KvLayerGroups* groups = nullptr;
};

// The sized cache. Constant after Engine creation.
struct KvCachePlan {
  KvGeometry geometry;        // the input geometry with kv_residual_slots decided (q4/kivi2)
  int64_t n_blocks = 0;       // >= 1, and n_blocks * block_size fits an int32
  int32_t max_num_seqs = 0;   // limits.max_num_seqs, or fewer (q4/kivi2: the residual slots)
  int32_t max_model_len = 0;  // <= n_blocks * block_size
};

// Plans the pool:
//   - q4/kivi2: every running sequence pins 1 + residual_blocks() fp16
//     residual slots (its open group and its window; kv/kv_quant_kivi.h),
//     in each layer group with sliding-window KV.
//     They are sized for max_num_seqs sequences within half of the budget
//     (kv_cache_bytes or the default), past kResidualSeqsAlways only while
//     they take at most an eighth of it (in a small pool more slots would
//     only crowd out the blocks those sequences need), and max_num_seqs is
//     capped to the sequences they serve (beyond that, steals would turn
//     open groups into lossy per-token keys). kivi2 with a window also has
//     kKvTransferSlots transfer slots (kv/kv_storage.h), taken off the top
//     of the budget first.
//   - kv_cache_bytes > 0 covers everything the cache allocates: the largest
//     n_blocks whose blocks plus the residual and transfer slots
//     (fixed_bytes) fit.
//   - the default budget: as many blocks as fit, but no more than every
//     sequence at full context (n_ctx_train, or 4096 when unknown) can use.
//   - the context: what one sequence can hold (KvLayerGroups::max_seq_tokens
//     with sliding-window KV; n_blocks * block_size without).
// kInvalidArgument (naming the flag) when kv_cache_bytes is less than one
// block, max_model_len exceeds n_ctx_train or the pool, or
// kv_residual_blocks < -1.
// REQUIRES: g's shape is positive, limits.max_num_seqs >= 1.
StatusOr<KvCachePlan> plan_kv_cache(const KvGeometry& g, const KvCacheLimits& limits);

}  // namespace omnibus
