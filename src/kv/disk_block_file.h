// DiskBlockFile: the on-disk format of one KV block of the disk tier
// (kv/disk_tier.h): encoding a header, and reading a file back with every
// check a loader needs. Format, byte by byte (little-endian; docs/disk-tier.md):
//
//   offset  bytes  field
//        0      8  magic "OMNIKVB\0"
//        8      4  version (kDiskBlockVersion)
//       12      4  header bytes H = 96 + 4 * n_tokens (everything before the payload)
//       16      8  model fingerprint                    -+
//       24      1  KV format (KvFormat), 3 bytes zero      |
//       28      4  block size                              |  the namespace:
//       32      4  n_layers                                |  all must match
//       36      4  n_kv_heads                              |
//       40      4  head_dim                                |
//       44      4  zero                                    |
//       48      8  block bytes (the payload's size)       -+
//       56      8  chain key of this block
//       64      8  chain key of the parent (PrefixCache::kRootKey for block 0)
//       72      4  n_tokens (== block size)
//       76      4  zero
//       80   4*n   the block's token ids (int32)
//     80+4n     8  payload xxh3_64
//     88+4n     8  header xxh3_64 over bytes [0, 88 + 4n)
//        H  bytes  payload: one block across all layers, K then V (opaque here)
//
// A file is `ok` only when the magic, version and header checksum hold, the
// namespace equals the reader's, the file is exactly H + block bytes long,
// and (on a full read) the payload checksum holds and the key, parent and
// tokens are the ones asked for.
//
// Thread-safety: pure functions and stateless file reads; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_format.h"

namespace omnibus {

inline constexpr uint32_t kDiskBlockVersion = 1;
inline constexpr size_t kDiskBlockFixedHeader = 80;  // before the tokens

// What must match for a block file to be loadable: the model, the KV format
// and geometry, and the payload size they imply.
struct DiskTierNamespace {
  uint64_t model_fingerprint = 0;
  KvFormat format = KvFormat::kF16;
  int32_t block_size = 0;
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  uint64_t block_bytes = 0;  // payload bytes of one block, all layers, K then V

  bool operator==(const DiskTierNamespace&) const = default;
  bool valid() const {
    return block_size >= 1 && n_layers >= 1 && n_kv_heads >= 1 && head_dim >= 1 && block_bytes >= 1;
  }
  // xxh3 of the fields and kDiskBlockVersion: names the namespace's
  // directory, so a format version bump starts a fresh directory.
  uint64_t hash() const;
  std::string dir_name() const;  // hash() as 16 hex digits
};

struct DiskBlockHeader {
  DiskTierNamespace ns;
  uint64_t key = 0;
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
  uint64_t payload_checksum = 0;

  size_t header_bytes() const { return kDiskBlockFixedHeader + 4 * tokens.size() + 16; }
};

// The file's bytes before the payload, header checksum included.
std::vector<uint8_t> encode_disk_block_header(const DiskBlockHeader& h);
uint64_t disk_block_payload_checksum(std::span<const uint8_t> payload);

// The outcome of reading a block file; one metric per kind of failure.
enum class DiskBlockCheck : uint8_t {
  kOk,
  kMissing,     // no such file (evicted meanwhile): a plain miss
  kCorrupt,     // bad magic, a checksum, a key or size field that disagrees
  kTruncated,   // shorter than its header says (or a header cut short)
  kForeign,     // a valid file of another namespace or format version
  kMismatch,    // a valid file of this namespace, but other tokens or parent
  kIo,          // the OS refused (open, read): neither loaded nor blamed on the file
  kNotRegular,  // not a regular file (a FIFO, device, socket, directory or symlink):
                // never read from, left alone
};
const char* disk_block_check_name(DiskBlockCheck c);

// Reads and checks the header of `path` (not the payload): magic, version,
// header checksum, namespace `ns`, and the file's size. Fills *h on kOk.
// Both readers open with O_NONBLOCK | O_NOFOLLOW and accept only a regular
// file (fstat of the opened descriptor): a FIFO or device named *.kvb can
// neither block the caller nor be read.
DiskBlockCheck read_disk_block_header(const std::string& path, const DiskTierNamespace& ns,
                                      DiskBlockHeader* h);

// Reads `path` whole and checks everything: the header as above, the key,
// parent and tokens asked for, and the payload checksum. On kOk `payload`
// (REQUIRES: payload.size() == ns.block_bytes) holds the block; otherwise its
// contents are unspecified.
DiskBlockCheck read_disk_block(const std::string& path, const DiskTierNamespace& ns, uint64_t key,
                               uint64_t parent, std::span<const int32_t> tokens,
                               std::span<uint8_t> payload);

}  // namespace omnibus
