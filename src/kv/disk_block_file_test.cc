#include "kv/disk_block_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace omnibus {
namespace {

template <class T>
T at(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

DiskBlockHeader test_header() {
  DiskBlockHeader h;
  h.ns.model_fingerprint = 0x1122334455667788ull;
  h.ns.format = KvFormat::kQ8;
  h.ns.block_size = 2;
  h.ns.n_layers = 3;
  h.ns.n_kv_heads = 4;
  h.ns.head_dim = 64;
  h.ns.block_bytes = 16;
  h.key = 0xAAAABBBBCCCCDDDDull;
  h.parent = 0x1111222233334444ull;
  h.tokens = {7, -1};
  h.payload_checksum = 0x0102030405060708ull;
  return h;
}

// The offsets documented in disk_block_file.h and docs/disk-tier.md.
TEST(DiskTierBlockFile, HeaderLayoutMatchesTheDoc) {
  const DiskBlockHeader h = test_header();
  const std::vector<uint8_t> b = encode_disk_block_header(h);
  ASSERT_EQ(b.size(), 96u + 4 * 2);
  ASSERT_EQ(b.size(), h.header_bytes());
  EXPECT_EQ(std::memcmp(b.data(), "OMNIKVB\0", 8), 0);
  EXPECT_EQ(at<uint32_t>(b, 8), kDiskBlockVersion);
  EXPECT_EQ(at<uint32_t>(b, 12), b.size());
  EXPECT_EQ(at<uint64_t>(b, 16), h.ns.model_fingerprint);
  EXPECT_EQ(at<uint8_t>(b, 24), uint8_t(KvFormat::kQ8));
  EXPECT_EQ(at<int32_t>(b, 28), 2);
  EXPECT_EQ(at<int32_t>(b, 32), 3);
  EXPECT_EQ(at<int32_t>(b, 36), 4);
  EXPECT_EQ(at<int32_t>(b, 40), 64);
  EXPECT_EQ(at<uint64_t>(b, 48), 16u);
  EXPECT_EQ(at<uint64_t>(b, 56), h.key);
  EXPECT_EQ(at<uint64_t>(b, 64), h.parent);
  EXPECT_EQ(at<uint32_t>(b, 72), 2u);
  EXPECT_EQ(at<int32_t>(b, 80), 7);
  EXPECT_EQ(at<int32_t>(b, 84), -1);
  EXPECT_EQ(at<uint64_t>(b, 88), h.payload_checksum);
}

TEST(DiskTierBlockFile, ReadClassifiesEachFault) {
  const std::string path =
      std::filesystem::temp_directory_path() / ("omnibus_block_" + std::to_string(::getpid()));
  DiskBlockHeader h = test_header();
  const std::vector<uint8_t> payload(16, 0x5a);
  h.payload_checksum = disk_block_payload_checksum(payload);
  std::vector<uint8_t> file = encode_disk_block_header(h);
  file.insert(file.end(), payload.begin(), payload.end());
  auto write = [&](const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };
  std::vector<uint8_t> dst(16);
  auto read = [&](const DiskTierNamespace& ns) {
    return read_disk_block(path, ns, h.key, h.parent, h.tokens, dst);
  };

  write(file);
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kOk);
  EXPECT_EQ(dst, payload);
  EXPECT_EQ(read_disk_block(path, h.ns, h.key, h.parent, std::vector<int32_t>{7, 0}, dst),
            DiskBlockCheck::kMismatch);
  EXPECT_EQ(read_disk_block(path, h.ns, h.key + 1, h.parent, h.tokens, dst),
            DiskBlockCheck::kCorrupt);
  DiskTierNamespace other = h.ns;
  other.head_dim = 128;
  EXPECT_EQ(read(other), DiskBlockCheck::kForeign);

  std::vector<uint8_t> bad = file;
  bad.back() ^= 1;  // payload
  write(bad);
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kCorrupt);
  bad = file;
  bad[30] ^= 1;  // block size field: the header checksum fails first
  write(bad);
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kCorrupt);
  write(std::vector<uint8_t>(file.begin(), file.end() - 1));
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kTruncated);
  write(std::vector<uint8_t>(file.begin(), file.begin() + 40));
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kTruncated);
  bad = file;
  bad.push_back(0);
  write(bad);
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kCorrupt);
  std::filesystem::remove(path);
  EXPECT_EQ(read(h.ns), DiskBlockCheck::kMissing);
}

}  // namespace
}  // namespace omnibus
