#include "kv/disk_block_file.h"

#define XXH_INLINE_ALL
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "util/check.h"

namespace omnibus {

static_assert(std::endian::native == std::endian::little, "block files are little-endian");

namespace {

constexpr char kMagic[8] = {'O', 'M', 'N', 'I', 'K', 'V', 'B', '\0'};
constexpr uint32_t kMaxTokens = 1u << 16;  // a header claiming more is corrupt

template <class T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}
template <class T>
T get(const uint8_t* b, size_t off) {
  T v;
  std::memcpy(&v, b + off, sizeof(T));
  return v;
}

// Reads exactly n bytes at `off`; the number read (short at end of file), or -1.
ssize_t pread_full(int fd, void* dst, size_t n, off_t off) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<uint8_t*>(dst) + done, n - done, off + off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += size_t(r);
  }
  return ssize_t(done);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens and checks the header; leaves the file open in *fd for the payload.
DiskBlockCheck open_and_check_header(const std::string& path, const DiskTierNamespace& ns, Fd* fd,
                                     DiskBlockHeader* h) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // (forever, at start-up). O_NOFOLLOW: a symlink is not one of our files.
  fd->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd->fd < 0) {
    if (errno == ENOENT) return DiskBlockCheck::kMissing;
    return errno == ELOOP ? DiskBlockCheck::kNotRegular : DiskBlockCheck::kIo;
  }
  struct stat st;
  if (::fstat(fd->fd, &st) != 0) return DiskBlockCheck::kIo;
  if (!S_ISREG(st.st_mode)) return DiskBlockCheck::kNotRegular;
  const uint64_t file_bytes = uint64_t(st.st_size);

  uint8_t fixed[kDiskBlockFixedHeader];
  const ssize_t r = pread_full(fd->fd, fixed, sizeof fixed, 0);
  if (r < 0) return DiskBlockCheck::kIo;
  if (size_t(r) < sizeof fixed) return DiskBlockCheck::kTruncated;
  if (std::memcmp(fixed, kMagic, sizeof kMagic) != 0) return DiskBlockCheck::kCorrupt;
  const uint32_t n_tokens = get<uint32_t>(fixed, 72);
  const uint32_t header_bytes = get<uint32_t>(fixed, 12);
  if (n_tokens > kMaxTokens || header_bytes != kDiskBlockFixedHeader + 4 * n_tokens + 16) {
    return DiskBlockCheck::kCorrupt;
  }
  std::vector<uint8_t> all(header_bytes);
  std::memcpy(all.data(), fixed, sizeof fixed);
  const size_t rest = header_bytes - sizeof fixed;
  const ssize_t r2 = pread_full(fd->fd, all.data() + sizeof fixed, rest, sizeof fixed);
  if (r2 < 0) return DiskBlockCheck::kIo;
  if (size_t(r2) < rest) return DiskBlockCheck::kTruncated;
  const uint64_t header_sum = XXH3_64bits(all.data(), header_bytes - 8);
  if (header_sum != get<uint64_t>(all.data(), header_bytes - 8)) return DiskBlockCheck::kCorrupt;

  // The header is what a writer of this format wrote: now whose is it?
  if (get<uint32_t>(all.data(), 8) != kDiskBlockVersion) return DiskBlockCheck::kForeign;
  DiskTierNamespace fns;
  fns.model_fingerprint = get<uint64_t>(all.data(), 16);
  fns.format = KvFormat(get<uint8_t>(all.data(), 24));
  fns.block_size = get<int32_t>(all.data(), 28);
  fns.n_layers = get<int32_t>(all.data(), 32);
  fns.n_kv_heads = get<int32_t>(all.data(), 36);
  fns.head_dim = get<int32_t>(all.data(), 40);
  fns.block_bytes = get<uint64_t>(all.data(), 48);
  if (!(fns == ns)) return DiskBlockCheck::kForeign;
  if (n_tokens != uint32_t(ns.block_size)) return DiskBlockCheck::kCorrupt;
  if (file_bytes < header_bytes + ns.block_bytes) return DiskBlockCheck::kTruncated;
  if (file_bytes > header_bytes + ns.block_bytes) return DiskBlockCheck::kCorrupt;

  h->ns = fns;
  h->key = get<uint64_t>(all.data(), 56);
  h->parent = get<uint64_t>(all.data(), 64);
  h->tokens.resize(n_tokens);
  std::memcpy(h->tokens.data(), all.data() + kDiskBlockFixedHeader, 4 * size_t(n_tokens));
  h->payload_checksum = get<uint64_t>(all.data(), header_bytes - 16);
  return DiskBlockCheck::kOk;
}

}  // namespace

uint64_t DiskTierNamespace::hash() const {
  const uint64_t f[] = {kDiskBlockVersion,    model_fingerprint,  uint64_t(format),
                        uint64_t(block_size), uint64_t(n_layers), uint64_t(n_kv_heads),
                        uint64_t(head_dim),   block_bytes};
  return XXH3_64bits(f, sizeof f);
}

std::string DiskTierNamespace::dir_name() const { return fmt::format("{:016x}", hash()); }

uint64_t disk_block_payload_checksum(std::span<const uint8_t> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

std::vector<uint8_t> encode_disk_block_header(const DiskBlockHeader& h) {
  OMNIBUS_CHECK(h.tokens.size() == size_t(h.ns.block_size));
  const size_t n = h.header_bytes();
  std::vector<uint8_t> b(n, 0);
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  put<uint32_t>(b, 8, kDiskBlockVersion);
  put<uint32_t>(b, 12, uint32_t(n));
  put<uint64_t>(b, 16, h.ns.model_fingerprint);
  put<uint8_t>(b, 24, uint8_t(h.ns.format));
  put<int32_t>(b, 28, h.ns.block_size);
  put<int32_t>(b, 32, h.ns.n_layers);
  put<int32_t>(b, 36, h.ns.n_kv_heads);
  put<int32_t>(b, 40, h.ns.head_dim);
  put<uint64_t>(b, 48, h.ns.block_bytes);
  put<uint64_t>(b, 56, h.key);
  put<uint64_t>(b, 64, h.parent);
  put<uint32_t>(b, 72, uint32_t(h.tokens.size()));
  std::memcpy(b.data() + kDiskBlockFixedHeader, h.tokens.data(), 4 * h.tokens.size());
  put<uint64_t>(b, n - 16, h.payload_checksum);
  put<uint64_t>(b, n - 8, XXH3_64bits(b.data(), n - 8));
  return b;
}

const char* disk_block_check_name(DiskBlockCheck c) {
  switch (c) {
    case DiskBlockCheck::kOk:
      return "ok";
    case DiskBlockCheck::kMissing:
      return "missing";
    case DiskBlockCheck::kCorrupt:
      return "corrupt";
    case DiskBlockCheck::kTruncated:
      return "truncated";
    case DiskBlockCheck::kForeign:
      return "foreign";
    case DiskBlockCheck::kMismatch:
      return "mismatch";
    case DiskBlockCheck::kNotRegular:
      return "not a regular file";
    case DiskBlockCheck::kIo:
      return "io error";
  }
  return "?";
}

DiskBlockCheck read_disk_block_header(const std::string& path, const DiskTierNamespace& ns,
                                      DiskBlockHeader* h) {
  Fd fd;
  return open_and_check_header(path, ns, &fd, h);
}

DiskBlockCheck read_disk_block(const std::string& path, const DiskTierNamespace& ns, uint64_t key,
                               uint64_t parent, std::span<const int32_t> tokens,
                               std::span<uint8_t> payload) {
  OMNIBUS_CHECK(payload.size() == ns.block_bytes);
  Fd fd;
  DiskBlockHeader h;
  const DiskBlockCheck c = open_and_check_header(path, ns, &fd, &h);
  if (c != DiskBlockCheck::kOk) return c;
  if (h.key != key) return DiskBlockCheck::kCorrupt;  // the file's name is its key
  if (h.parent != parent || tokens.size() != h.tokens.size() ||
      std::memcmp(tokens.data(), h.tokens.data(), 4 * tokens.size()) != 0) {
    return DiskBlockCheck::kMismatch;
  }
  const ssize_t r = pread_full(fd.fd, payload.data(), payload.size(), off_t(h.header_bytes()));
  if (r < 0) return DiskBlockCheck::kIo;
  if (size_t(r) < payload.size()) return DiskBlockCheck::kTruncated;
  if (disk_block_payload_checksum(payload) != h.payload_checksum) return DiskBlockCheck::kCorrupt;
  return DiskBlockCheck::kOk;
}

}  // namespace omnibus
