#include "kv/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

#include "kv/disk_tier_testing.h"
#include "kv/prefix_cache.h"

namespace omnibus {
namespace {

using namespace disk_tier_testing;  // NOLINT: the fixture and helpers

TEST_F(DiskTierTest, RoundTrip) {
  DiskTier tier(config());
  ASSERT_TRUE(tier.enabled());
  const auto chain = make_chain(3);
  store_all(tier, chain);
  const std::vector<uint64_t> keys = {chain[0].key, chain[1].key, chain[2].key, 42};
  EXPECT_EQ(tier.lookup(keys), 3);
  EXPECT_TRUE(tier.contains(chain[1].key));
  EXPECT_FALSE(tier.contains(42));
  EXPECT_EQ(fs::file_size(path_of(chain[0].key)), kFileBytes);
  // Other users can neither read other tenants' KV nor plant blocks (docs/security.md).
  EXPECT_EQ(fs::status(ns_dir()).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(path_of(chain[0].key)).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);

  std::promise<void> called;
  auto load = tier.request_load(items_of(chain), [&] { called.set_value(); });
  load->wait();
  called.get_future().wait();
  ASSERT_TRUE(load->done());
  ASSERT_EQ(load->n_loaded(), 3);
  for (int i = 0; i < 3; i++) {
    const auto p = load->payload(i);
    EXPECT_EQ(std::vector<uint8_t>(p.begin(), p.end()), chain[size_t(i)].payload) << i;
  }
  bool hit = false;
  EXPECT_EQ(load_sync(tier, chain[2], &hit), chain[2].payload);
  EXPECT_TRUE(hit);

  const DiskTierStats s = tier.stats();
  EXPECT_TRUE(s.enabled);
  EXPECT_TRUE(s.writes_enabled);
  EXPECT_EQ(s.blocks_written, 3u);
  EXPECT_EQ(s.bytes_written, 3 * kFileBytes);
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.bytes_read, 4 * kBlockBytes);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes_on_disk, 3 * kFileBytes);
  EXPECT_EQ(s.load_latency_count, 4u);
  uint64_t in_buckets = 0;
  for (uint64_t c : s.load_latency_buckets) in_buckets += c;
  EXPECT_EQ(in_buckets, 4u);
  tier.check_integrity();
}

TEST_F(DiskTierTest, ChainStopsAtFirstMiss) {
  DiskTier tier(config());
  const auto chain = make_chain(3);
  store_all(tier, {chain[0], chain[2]});
  auto load = tier.request_load(items_of(chain));
  load->wait();
  EXPECT_EQ(load->n_loaded(), 1);
  EXPECT_EQ(std::vector<uint8_t>(load->payload(0).begin(), load->payload(0).end()),
            chain[0].payload);
  EXPECT_EQ(tier.stats().hits, 1u);
  EXPECT_EQ(tier.stats().misses, 2u);  // block 1 missing, block 2 not tried
}

TEST_F(DiskTierTest, RestartRebuildsIndexAndLoadsIdenticalBytes) {
  const auto chain = make_chain(3);
  {
    DiskTier tier(config());
    store_all(tier, chain);
  }
  DiskTier tier(config());
  ASSERT_TRUE(tier.enabled());
  EXPECT_EQ(tier.stats().entries, 3u);
  EXPECT_EQ(tier.stats().bytes_on_disk, 3 * kFileBytes);
  auto load = tier.request_load(items_of(chain));
  load->wait();
  ASSERT_EQ(load->n_loaded(), 3);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(std::vector<uint8_t>(load->payload(i).begin(), load->payload(i).end()),
              chain[size_t(i)].payload);
  }
  tier.check_integrity();
}

TEST_F(DiskTierTest, DestructorDrainsQueuedWrites) {
  const auto chain = make_chain(5);
  {
    DiskTier tier(config());
    for (const auto& b : chain) ASSERT_TRUE(tier.store(b));
  }  // no flush
  DiskTier tier(config());
  EXPECT_EQ(tier.stats().entries, 5u);
}

TEST_F(DiskTierTest, DestructorCancelsQueuedLoadsAndFinishesTheCurrentOne) {
  const auto chain = make_chain(2);
  auto tier = std::make_unique<DiskTier>(config());
  store_all(*tier, chain);
  std::promise<void> entered;
  std::promise<void> release;
  // on_done runs on the I/O thread: holding it there keeps load `a` current.
  auto a = tier->request_load({item_of(chain[0])}, [&] {
    entered.set_value();
    release.get_future().wait();
  });
  entered.get_future().wait();
  auto b = tier->request_load(items_of(chain));
  std::thread destroy([&] { tier.reset(); });
  b->wait();  // cancelled by the destructor while `a` is still in progress
  EXPECT_EQ(b->n_loaded(), 0);
  release.set_value();
  destroy.join();
  ASSERT_TRUE(a->done());
  EXPECT_EQ(a->n_loaded(), 1);
  EXPECT_EQ(std::vector<uint8_t>(a->payload(0).begin(), a->payload(0).end()), chain[0].payload);
}

TEST_F(DiskTierTest, DuplicateStoreIsNotRewritten) {
  DiskTier tier(config());
  const auto chain = make_chain(1);
  store_all(tier, chain);
  EXPECT_FALSE(tier.store(chain[0]));
  tier.flush();
  EXPECT_EQ(tier.stats().blocks_written, 1u);
  EXPECT_EQ(tier.stats().write_drops, 0u);
}

TEST_F(DiskTierTest, LruEvictionBySizeAndHitRefreshes) {
  DiskTier tier(config(3 * kFileBytes));
  const auto chain = make_chain(5);
  store_all(tier, {chain[0], chain[1], chain[2]});
  bool hit = false;
  load_sync(tier, chain[0], &hit);  // 0 is now the most recently used; 1 the least
  ASSERT_TRUE(hit);
  store_all(tier, {chain[3]});
  EXPECT_TRUE(tier.contains(chain[0].key));
  EXPECT_FALSE(tier.contains(chain[1].key));
  EXPECT_FALSE(fs::exists(path_of(chain[1].key)));
  EXPECT_TRUE(tier.contains(chain[2].key));
  EXPECT_TRUE(tier.contains(chain[3].key));
  store_all(tier, {chain[4]});
  EXPECT_FALSE(tier.contains(chain[2].key));
  const DiskTierStats s = tier.stats();
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes_on_disk, 3 * kFileBytes);
  tier.check_integrity();
}

TEST_F(DiskTierTest, LruOrderSurvivesRestartThroughMtimes) {
  const auto chain = make_chain(4);
  {
    DiskTier tier(config(3 * kFileBytes));
    store_all(tier, {chain[0], chain[1], chain[2]});
  }
  // Oldest first: 1, 0, 2 (explicit times: file systems differ in resolution).
  set_mtime(path_of(chain[1].key), 1000000000);
  set_mtime(path_of(chain[0].key), 1000000100);
  set_mtime(path_of(chain[2].key), 1000000200);
  {
    DiskTier tier(config(3 * kFileBytes));
    store_all(tier, {chain[3]});
    EXPECT_FALSE(tier.contains(chain[1].key));
    EXPECT_TRUE(tier.contains(chain[0].key));
    // A hit touches the file's mtime.
    bool hit = false;
    load_sync(tier, chain[0], &hit);
    ASSERT_TRUE(hit);
    struct stat st;
    ASSERT_EQ(::stat(path_of(chain[0].key).c_str(), &st), 0);
    EXPECT_GT(st.st_mtim.tv_sec, 1000000200);
  }
}

TEST_F(DiskTierTest, SmallerLimitAtStartupEvicts) {
  const auto chain = make_chain(3);
  {
    DiskTier tier(config());
    store_all(tier, chain);
  }
  set_mtime(path_of(chain[0].key), 1000000000);
  set_mtime(path_of(chain[1].key), 1000000100);
  set_mtime(path_of(chain[2].key), 1000000200);
  DiskTier tier(config(2 * kFileBytes));
  EXPECT_EQ(tier.stats().entries, 2u);
  EXPECT_EQ(tier.stats().evictions, 1u);
  EXPECT_FALSE(fs::exists(path_of(chain[0].key)));
}

TEST_F(DiskTierTest, FlippedPayloadByteIsSkippedAndDeleted) {
  const auto chain = make_chain(2);
  {
    DiskTier tier(config());
    store_all(tier, chain);
  }
  flip_byte(path_of(chain[1].key), kFileBytes - 1);
  DiskTier tier(config());
  EXPECT_EQ(tier.stats().entries, 2u);  // start-up reads headers only
  bool hit = true;
  load_sync(tier, chain[1], &hit);
  EXPECT_FALSE(hit);
  const DiskTierStats s = tier.stats();
  EXPECT_EQ(s.skipped_corrupt, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_FALSE(tier.contains(chain[1].key));
  EXPECT_FALSE(fs::exists(path_of(chain[1].key)));
  load_sync(tier, chain[0], &hit);
  EXPECT_TRUE(hit);
  tier.check_integrity();
}

TEST_F(DiskTierTest, FlippedHeaderByteIsSkippedAtStartup) {
  const auto chain = make_chain(2);
  {
    DiskTier tier(config());
    store_all(tier, chain);
  }
  flip_byte(path_of(chain[0].key), kDiskBlockFixedHeader + 1);  // a token
  flip_byte(path_of(chain[1].key), 0);                          // the magic
  DiskTier tier(config());
  const DiskTierStats s = tier.stats();
  EXPECT_EQ(s.skipped_corrupt, 2u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_FALSE(fs::exists(path_of(chain[0].key)));
  EXPECT_FALSE(fs::exists(path_of(chain[1].key)));
  bool hit = true;
  load_sync(tier, chain[0], &hit);
  EXPECT_FALSE(hit);
}

TEST_F(DiskTierTest, FlippedHeaderByteWhileRunningIsNotLoaded) {
  DiskTier tier(config());
  const auto chain = make_chain(1);
  store_all(tier, chain);
  flip_byte(path_of(chain[0].key), 60);  // the key
  auto load = tier.request_load(items_of(chain));
  load->wait();
  EXPECT_EQ(load->n_loaded(), 0);
  EXPECT_EQ(tier.stats().skipped_corrupt, 1u);
  EXPECT_FALSE(tier.contains(chain[0].key));
}

TEST_F(DiskTierTest, TruncatedFilesAreSkipped) {
  const auto chain = make_chain(2);
  {
    DiskTier tier(config());
    store_all(tier, chain);
  }
  fs::resize_file(path_of(chain[0].key), kFileBytes - 10);  // payload cut
  fs::resize_file(path_of(chain[1].key), 50);               // header cut
  DiskTier tier(config());
  const DiskTierStats s = tier.stats();
  EXPECT_EQ(s.skipped_truncated, 2u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_FALSE(fs::exists(path_of(chain[0].key)));
  bool hit = true;
  load_sync(tier, chain[0], &hit);
  EXPECT_FALSE(hit);
}

TEST_F(DiskTierTest, TruncatedWhileRunningIsNotLoaded) {
  DiskTier tier(config());
  const auto chain = make_chain(1);
  store_all(tier, chain);
  fs::resize_file(path_of(chain[0].key), kFileBytes - 1);
  bool hit = true;
  load_sync(tier, chain[0], &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(tier.stats().skipped_truncated, 1u);
  EXPECT_FALSE(tier.contains(chain[0].key));
}

TEST_F(DiskTierTest, OtherNamespacesAreSeparateAndForeignFilesLeftAlone) {
  const auto chain = make_chain(1);
  {
    DiskTier tier(config());
    store_all(tier, chain);
  }
  const std::string ours = path_of(chain[0].key);
  std::vector<DiskTierNamespace> others(4, test_ns());
  others[0].model_fingerprint = 0x5678;
  others[1].format = KvFormat::kQ8;
  others[2].block_size = 8;
  others[3].n_layers = 3;
  for (const DiskTierNamespace& other : others) {
    SCOPED_TRACE(other.dir_name());
    DiskTierConfig c = config();
    c.ns = other;
    {  // Its own directory: sees nothing of ours.
      DiskTier tier(c);
      ASSERT_TRUE(tier.enabled());
      EXPECT_EQ(tier.stats().entries, 0u);
      EXPECT_EQ(tier.stats().skipped_foreign, 0u);
    }
    // Our file copied into its directory: foreign, never loaded, never deleted.
    fs::copy_file(ours, path_of(chain[0].key, other), fs::copy_options::overwrite_existing);
    DiskTier tier(c);
    EXPECT_EQ(tier.stats().skipped_foreign, 1u);
    EXPECT_EQ(tier.stats().entries, 0u);
    EXPECT_FALSE(tier.contains(chain[0].key));
    EXPECT_TRUE(fs::exists(path_of(chain[0].key, other)));
  }
  DiskTier tier(config());  // ours untouched
  EXPECT_EQ(tier.stats().entries, 1u);
  bool hit = false;
  EXPECT_EQ(load_sync(tier, chain[0], &hit), chain[0].payload);
  EXPECT_TRUE(hit);
}

TEST_F(DiskTierTest, TokensOrParentMismatchIsAMiss) {
  DiskTier tier(config());
  const auto chain = make_chain(1);
  store_all(tier, chain);
  std::vector<uint8_t> dst(kBlockBytes);
  DiskLoadItem other_tokens = item_of(chain[0]);
  other_tokens.tokens[3] += 1;  // same key, other tokens: a collision
  EXPECT_FALSE(tier.load(other_tokens, dst));
  DiskLoadItem other_parent = item_of(chain[0]);
  other_parent.parent += 1;
  EXPECT_FALSE(tier.load(other_parent, dst));
  EXPECT_EQ(tier.stats().mismatches, 2u);
  EXPECT_EQ(tier.stats().misses, 2u);
  EXPECT_TRUE(tier.contains(chain[0].key));  // the file is fine for its own tokens
  EXPECT_TRUE(tier.load(item_of(chain[0]), dst));
  EXPECT_EQ(dst, chain[0].payload);
}

TEST_F(DiskTierTest, TempFileOfAnInterruptedWriteIsRemoved) {
  const auto chain = make_chain(1);
  fs::create_directories(ns_dir());
  const std::string tmp = fmt::format("{}/{:016x}.tmp", ns_dir(), chain[0].key);
  write_bytes(tmp, "OMNIKVB partial");
  DiskTier tier(config());
  ASSERT_TRUE(tier.enabled());
  EXPECT_EQ(tier.stats().temp_files_removed, 1u);
  EXPECT_EQ(tier.stats().entries, 0u);
  EXPECT_FALSE(fs::exists(tmp));
}

TEST_F(DiskTierTest, KillDuringWriteLeavesOnlyATempFile) {
  const auto chain = make_chain(1);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    DiskTierConfig c = config();
    c.hooks.mid_write = [&](uint64_t) {
      const char x = 'w';
      if (::write(pipe_fds[1], &x, 1) != 1) ::_exit(2);
      for (;;) ::pause();  // killed here, the payload unwritten
    };
    DiskTier tier(c);
    if (!tier.enabled() || !tier.store(chain[0])) ::_exit(3);
    tier.flush();
    ::_exit(4);
  }
  ::close(pipe_fds[1]);
  char x = 0;
  ASSERT_EQ(::read(pipe_fds[0], &x, 1), 1);  // the child is mid-write
  ::close(pipe_fds[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const std::string tmp = fmt::format("{}/{:016x}.tmp", ns_dir(), chain[0].key);
  EXPECT_TRUE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(path_of(chain[0].key)));

  DiskTier tier(config());  // the dead child's lock is gone with it
  ASSERT_TRUE(tier.enabled());
  EXPECT_EQ(tier.stats().temp_files_removed, 1u);
  EXPECT_EQ(tier.stats().entries, 0u);
  EXPECT_FALSE(fs::exists(tmp));
  bool hit = true;
  load_sync(tier, chain[0], &hit);
  EXPECT_FALSE(hit);
}

TEST_F(DiskTierTest, DirectoryThatIsAFileDisablesTheTier) {
  const std::string file = dir_ + "/not_a_dir";
  write_bytes(file, "x");
  for (const std::string& d : {file, file + "/sub"}) {
    DiskTierConfig c = config();
    c.dir = d;
    DiskTier tier(c);
    EXPECT_FALSE(tier.enabled());
    const auto chain = make_chain(1);
    EXPECT_FALSE(tier.store(chain[0]));
    tier.flush();
    EXPECT_FALSE(tier.contains(chain[0].key));
    bool hit = true;
    load_sync(tier, chain[0], &hit);
    EXPECT_FALSE(hit);
    auto load = tier.request_load(items_of(chain));
    EXPECT_TRUE(load->done());
    EXPECT_EQ(load->n_loaded(), 0);
    const DiskTierStats s = tier.stats();
    EXPECT_FALSE(s.enabled);
    EXPECT_FALSE(s.writes_enabled);
    EXPECT_EQ(s.blocks_written, 0u);
  }
}

TEST_F(DiskTierTest, SecondTierOnTheSameNamespaceIsDisabled) {
  DiskTier first(config());
  DiskTier second(config());
  EXPECT_TRUE(first.enabled());
  EXPECT_FALSE(second.enabled());
}

TEST_F(DiskTierTest, WriteErrorDisablesWritesLoadsGoOn) {
  const auto chain = make_chain(3);
  DiskTierConfig c = config();
  c.hooks.write_errno = [&](uint64_t key) { return key == chain[1].key ? EIO : 0; };
  DiskTier tier(c);
  store_all(tier, {chain[0]});
  ASSERT_TRUE(tier.store(chain[1]));
  tier.flush();
  DiskTierStats s = tier.stats();
  EXPECT_TRUE(s.enabled);
  EXPECT_FALSE(s.writes_enabled);
  EXPECT_EQ(s.write_errors, 1u);
  EXPECT_EQ(s.write_drops, 1u);
  EXPECT_EQ(s.blocks_written, 1u);
  EXPECT_FALSE(tier.store(chain[2]));
  EXPECT_EQ(tier.stats().write_drops, 2u);
  EXPECT_FALSE(tier.contains(chain[1].key));
  bool hit = false;
  EXPECT_EQ(load_sync(tier, chain[0], &hit), chain[0].payload);
  EXPECT_TRUE(hit);
  for (const auto& e : fs::directory_iterator(ns_dir())) {
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  }
}

TEST_F(DiskTierTest, DiskFullEvictsOurOldestAndRetriesOnce) {
  const auto chain = make_chain(3);
  std::atomic<int> enospc_left{1};
  DiskTierConfig c = config();
  c.hooks.write_errno = [&](uint64_t key) {
    return key == chain[2].key && enospc_left.fetch_sub(1) > 0 ? ENOSPC : 0;
  };
  DiskTier tier(c);
  store_all(tier, chain);
  DiskTierStats s = tier.stats();
  EXPECT_TRUE(s.writes_enabled);
  EXPECT_EQ(s.write_errors, 1u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.blocks_written, 3u);
  EXPECT_FALSE(tier.contains(chain[0].key));  // the oldest made room
  EXPECT_TRUE(tier.contains(chain[2].key));

  tier.check_integrity();
}

TEST_F(DiskTierTest, DiskFullForGoodDegradesToNoWrites) {
  const auto chain = make_chain(2);
  DiskTierConfig c = config();
  c.hooks.write_errno = [&](uint64_t key) { return key == chain[1].key ? ENOSPC : 0; };
  DiskTier tier(c);
  store_all(tier, {chain[0]});
  ASSERT_TRUE(tier.store(chain[1]));
  tier.flush();
  const DiskTierStats s = tier.stats();
  EXPECT_TRUE(s.enabled);
  EXPECT_FALSE(s.writes_enabled);
  EXPECT_EQ(s.write_errors, 2u);  // the write and its retry
  EXPECT_EQ(s.evictions, 1u);     // chain[0] made room for the retry
  EXPECT_EQ(s.entries, 0u);
}

TEST_F(DiskTierTest, FullQueueDropsAndNeverBlocks) {
  const auto chain = make_chain(5);
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  DiskTierConfig c = config();
  c.max_pending_writes = 2;
  c.hooks.mid_write = [&](uint64_t key) {
    if (key == chain[0].key) {
      entered.set_value();
      released.wait();
    }
  };
  DiskTier tier(c);
  ASSERT_TRUE(tier.store(chain[0]));
  entered.get_future().wait();  // the writer holds block 0; the queue is empty
  EXPECT_TRUE(tier.store(chain[1]));
  EXPECT_TRUE(tier.store(chain[2]));
  EXPECT_FALSE(tier.store(chain[3]));  // returns at once though the writer is stuck
  EXPECT_FALSE(tier.store(chain[4]));
  EXPECT_EQ(tier.stats().write_drops, 2u);
  release.set_value();
  tier.flush();
  const DiskTierStats s = tier.stats();
  EXPECT_EQ(s.blocks_written, 3u);
  EXPECT_EQ(s.write_drops, 2u);
  EXPECT_EQ(tier.lookup(std::vector<uint64_t>{chain[0].key, chain[1].key, chain[2].key}), 3);
  EXPECT_FALSE(tier.contains(chain[3].key));
}

TEST_F(DiskTierTest, ConcurrentStoresAndLoads) {
  DiskTier tier(config(40 * kFileBytes));  // evicts while loads run
  std::vector<std::vector<DiskBlock>> chains;
  for (int t = 0; t < 3; t++) chains.push_back(make_chain(30, 10000 * t));
  std::vector<std::thread> threads;
  std::atomic<int> loaded{0};
  for (int t = 0; t < 3; t++) {
    threads.emplace_back([&, t] {
      for (const DiskBlock& b : chains[size_t(t)]) {
        tier.store(b);
        if (b.key % 3 == 0) tier.flush();
      }
      for (int round = 0; round < 5; round++) {
        auto load = tier.request_load(items_of(chains[size_t(t)]));
        load->wait();
        for (int i = 0; i < load->n_loaded(); i++) {
          const auto p = load->payload(i);
          if (std::vector<uint8_t>(p.begin(), p.end()) == chains[size_t(t)][size_t(i)].payload) {
            loaded++;
          } else {
            ADD_FAILURE() << "wrong bytes";
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  tier.flush();
  tier.check_integrity();
  const DiskTierStats s = tier.stats();
  EXPECT_LE(s.bytes_on_disk, 40 * kFileBytes);
  EXPECT_EQ(s.hits, uint64_t(loaded.load()));
  EXPECT_EQ(s.skipped_corrupt + s.skipped_truncated + s.mismatches, 0u);
}

}  // namespace
}  // namespace omnibus
