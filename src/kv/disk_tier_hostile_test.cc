// The disk tier against what a local user can put in its directory and a
// file system that others fill (issue 34): only regular files are ever
// opened, never blocking; writes stay within the file system's free space and
// pause, visibly, when there is none.
#include <sys/stat.h>

#include <atomic>
#include <filesystem>

#include "kv/disk_tier.h"
#include "kv/disk_tier_testing.h"

namespace omnibus {
namespace {

using namespace disk_tier_testing;  // NOLINT: the fixture and helpers

// Issue 34: a FIFO named *.kvb hung start-up forever (open() waited for a
// writer). Only regular files are read: a FIFO, a symlink (even to a valid
// block) and a directory with our names are skipped, left alone and counted
// as foreign; the real blocks beside them still load.
TEST_F(DiskTierTest, OnlyRegularFilesAreRead) {
  const auto chain = make_chain(2);
  {
    DiskTier tier(config());
    store_all(tier, {chain[0]});
  }
  fs::create_directories(ns_dir());
  const std::string fifo = path_of(0x1111);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string link = path_of(chain[1].key);
  fs::create_symlink(path_of(chain[0].key), link);
  fs::create_directory(path_of(0x2222));
  ASSERT_EQ(::mkfifo((ns_dir() + "/probe.tmp").c_str(), 0644), 0);  // the probe write's name
  ASSERT_EQ(::mkfifo((ns_dir() + "/0000000000003333.tmp").c_str(), 0644), 0);

  DiskTier tier(config());  // returns: nothing blocks
  ASSERT_TRUE(tier.enabled());
  DiskTierStats s = tier.stats();
  EXPECT_TRUE(s.writes_enabled);
  EXPECT_EQ(s.skipped_foreign, 3u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_FALSE(fs::exists(ns_dir() + "/0000000000003333.tmp"));
  bool hit = false;
  EXPECT_EQ(load_sync(tier, chain[0], &hit), chain[0].payload);
  EXPECT_TRUE(hit);

  // An indexed block replaced by a FIFO behind the tier's back: a miss, at once.
  ASSERT_EQ(::unlink(path_of(chain[0].key).c_str()), 0);
  ASSERT_EQ(::mkfifo(path_of(chain[0].key).c_str(), 0644), 0);
  load_sync(tier, chain[0], &hit);
  EXPECT_FALSE(hit);
  EXPECT_FALSE(tier.contains(chain[0].key));
  EXPECT_EQ(tier.stats().skipped_foreign, 4u);
  tier.check_integrity();
}

// A FIFO where the next write's temp file goes would block the writer thread
// forever: the temp file is always created anew.
TEST_F(DiskTierTest, AFifoAtATempNameDoesNotBlockWrites) {
  const auto chain = make_chain(1);
  DiskTier tier(config());
  ASSERT_EQ(::mkfifo(fmt::format("{}/{:016x}.tmp", ns_dir(), chain[0].key).c_str(), 0644), 0);
  store_all(tier, chain);
  EXPECT_TRUE(tier.contains(chain[0].key));
  EXPECT_TRUE(fs::is_regular_file(path_of(chain[0].key)));
}

// Issue 34: on a file system that others had filled, every write failed with
// ENOSPC, evicted the block before it and was retried: write errors on every
// write, one block kept, and writes_enabled still true. Now the writer asks
// the file system first: with no room for a block, writes pause (no write
// attempted, writes_enabled false) and resume when room is back.
TEST_F(DiskTierTest, AFullFileSystemPausesWritesUntilThereIsRoom) {
  const auto chain = make_chain(3);
  std::atomic<uint64_t> free_bytes{kFileBytes + kFileBytes / 2};  // one block is kept free
  DiskTierConfig c = config();
  c.hooks.free_bytes = [&] { return free_bytes.load(); };
  DiskTier tier(c);
  store_all(tier, {chain[0]});
  DiskTierStats s = tier.stats();
  EXPECT_FALSE(s.writes_enabled);
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.write_errors, 0u);  // nothing was attempted
  EXPECT_EQ(s.write_drops, 1u);
  EXPECT_EQ(s.entries, 0u);

  free_bytes = 10 * kFileBytes;  // the disk was cleaned up
  store_all(tier, {chain[1]});
  s = tier.stats();
  EXPECT_TRUE(s.writes_enabled);
  EXPECT_EQ(s.write_errors, 0u);
  EXPECT_TRUE(tier.contains(chain[1].key));
  tier.check_integrity();
}

// A file system smaller than max_bytes: the tier keeps what fits (less one
// block left free) by evicting its LRU files before writing, never by a
// failed write.
TEST_F(DiskTierTest, AFileSystemSmallerThanTheLimitEvictsInsteadOfFailing) {
  const auto chain = make_chain(6);
  DiskTierConfig c = config(100 * kFileBytes);
  const uint64_t capacity = 3 * kFileBytes;  // what the "file system" holds
  c.hooks.free_bytes = [&] {
    uint64_t used = 0;
    for (const auto& e : fs::directory_iterator(ns_dir())) {
      if (e.path().extension() == ".kvb") used += e.file_size();
    }
    return used < capacity ? capacity - used : 0;
  };
  DiskTier tier(c);
  store_all(tier, chain);
  const DiskTierStats s = tier.stats();
  EXPECT_TRUE(s.writes_enabled);
  EXPECT_EQ(s.write_errors, 0u);
  EXPECT_EQ(s.blocks_written, 6u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 4u);
  EXPECT_TRUE(tier.contains(chain[5].key));
  EXPECT_TRUE(tier.contains(chain[4].key));
  tier.check_integrity();
}

}  // namespace
}  // namespace omnibus
