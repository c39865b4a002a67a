// The disk tier's test fixture and block helpers, shared by
// disk_tier_test.cc (the store, its faults) and disk_tier_hostile_test.cc
// (what a local user can put in its directory, a full file system).
// DiskTierTest gives each test a fresh temporary directory.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kv/disk_tier.h"
#include "kv/prefix_cache.h"

namespace omnibus::disk_tier_testing {

namespace fs = std::filesystem;

inline constexpr int32_t kBlockSize = 4;
inline constexpr uint64_t kBlockBytes = 256;
inline constexpr uint64_t kFileBytes =
    kDiskBlockFixedHeader + 4 * kBlockSize + 16 + kBlockBytes;  // 368

inline DiskTierNamespace test_ns() {
  DiskTierNamespace ns;
  ns.model_fingerprint = 0x1234;
  ns.format = KvFormat::kF16;
  ns.block_size = kBlockSize;
  ns.n_layers = 2;
  ns.n_kv_heads = 2;
  ns.head_dim = 8;
  ns.block_bytes = kBlockBytes;
  return ns;
}

// Block i of a chain: tokens 100 * i + {0..3}, payload bytes derived from the key.
inline std::vector<DiskBlock> make_chain(int n, int first_token = 0) {
  std::vector<DiskBlock> chain;
  uint64_t parent = PrefixCache::kRootKey;
  for (int i = 0; i < n; i++) {
    DiskBlock b;
    for (int t = 0; t < kBlockSize; t++) b.tokens.push_back(first_token + 100 * i + t);
    b.parent = parent;
    b.key = PrefixCache::chain_key(b.tokens, parent);
    b.payload.resize(kBlockBytes);
    for (size_t j = 0; j < kBlockBytes; j++) b.payload[j] = uint8_t((b.key >> (j % 8 * 8)) + j);
    parent = b.key;
    chain.push_back(b);
  }
  return chain;
}

inline DiskLoadItem item_of(const DiskBlock& b) { return DiskLoadItem{b.key, b.parent, b.tokens}; }
inline std::vector<DiskLoadItem> items_of(const std::vector<DiskBlock>& chain) {
  std::vector<DiskLoadItem> items;
  for (const DiskBlock& b : chain) items.push_back(item_of(b));
  return items;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}
inline void flip_byte(const std::string& path, size_t offset) {
  std::string b = read_bytes(path);
  ASSERT_LT(offset, b.size());
  b[offset] = char(b[offset] ^ 0x40);
  write_bytes(path, b);
}
inline void set_mtime(const std::string& path, time_t seconds) {
  const struct timespec ts[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0);
}

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = fs::temp_directory_path() / "omnibus_disk_tier_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  DiskTierConfig config(uint64_t max_bytes = 1 << 20) const {
    DiskTierConfig c;
    c.dir = dir_;
    c.max_bytes = max_bytes;
    c.ns = test_ns();
    c.log = false;
    return c;
  }
  std::string ns_dir(const DiskTierNamespace& ns = test_ns()) const {
    return dir_ + "/" + ns.dir_name();
  }
  std::string path_of(uint64_t key, const DiskTierNamespace& ns = test_ns()) const {
    return fmt::format("{}/{:016x}.kvb", ns_dir(ns), key);
  }
  // Stores the blocks and waits until they are on disk.
  static void store_all(DiskTier& tier, const std::vector<DiskBlock>& blocks) {
    for (const DiskBlock& b : blocks) ASSERT_TRUE(tier.store(b));
    tier.flush();
  }
  static std::vector<uint8_t> load_sync(DiskTier& tier, const DiskBlock& b, bool* hit) {
    std::vector<uint8_t> dst(kBlockBytes);
    *hit = tier.load(item_of(b), dst);
    return dst;
  }

  std::string dir_;
};

}  // namespace omnibus::disk_tier_testing
