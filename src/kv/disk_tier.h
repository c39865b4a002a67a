// DiskTier: a store of full prefix blocks on local disk (the KV cache's disk
// tier, issue 18), keyed by the prefix cache's hash chain (kv/prefix_cache.h).
// Blocks the pool evicts are written here asynchronously; a prefix that misses
// in the pool but hits here is read back (off the engine thread) instead of
// recomputed. The store knows nothing of KvStorage: a block's payload is the
// opaque bytes of one block across all layers, K then V, ns.block_bytes long.
//
// On disk (file format: kv/disk_block_file.h, docs/disk-tier.md):
//   <dir>/<namespace hash>/LOCK              flock'ed by the one tier using it
//   <dir>/<namespace hash>/<key hex>.kvb     one file per block
//   <dir>/<namespace hash>/<key hex>.tmp     a write in progress (renamed when whole)
// Each namespace (model fingerprint, KV format, geometry, file version) has its
// own directory, its own size limit and its own LRU: two models may share
// <dir>; neither sees, counts, evicts or deletes the other's files.
//
// Lifecycle and index. The constructor takes the namespace directory's lock,
// removes temp files (a write killed midway), and rebuilds the index from the
// headers of the .kvb files (checksum of the header verified; the payload's is
// verified on every load), LRU-ordered by file mtime. A corrupt or truncated
// file of ours is deleted; a foreign one (another namespace or version, e.g. a
// file copied in) is left alone and not indexed, and so is anything that is
// not a regular file (a FIFO, device or symlink: never opened blocking, never
// read; disk_block_file.h). Each is counted and logged.
// Over max_bytes, the least recently used files are deleted (also at start-up,
// after the limit shrank). A load hit moves the block to the front and touches
// the file's mtime, so the order survives a restart.
//
// Writes: store() copies nothing but moves the block into a bounded queue and
// returns at once; when the queue is full the block is dropped and counted
// (the engine thread never blocks on disk). One writer thread writes
// <key>.tmp, then rename()s it to <key>.kvb (no fsync: a kill leaves the old
// state or the new file whole; a torn file after power loss fails its
// checksum). A block already on disk or queued is not written again.
//
// Loads: request_load() queues a chain of blocks for the one I/O thread,
// which reads and verifies them in order and stops at the first block that is
// missing or fails a check (a later block is useless without it); the
// DiskLoad it returns can be polled (done()) or waited on (condition
// variable), and an optional callback runs on the I/O thread when it is done.
// load() does one block on the caller's thread. A block that fails a check
// (corrupt, truncated, other tokens or parent for its key) is a miss; a bad
// file is also dropped from the index and deleted. Other tokens under the
// same key (a hash collision) leave the file in place.
//
// Failure policy: never throws, never aborts on an OS error.
//  - A directory that cannot be created, locked or written (a path that is a
//    file, EROFS, EACCES, ENOSPC at the probe write), or a namespace already
//    locked by another tier: enabled() == false from the start, with a log
//    line; store() and lookups are no-ops / misses.
//  - The file system may hold less than max_bytes (it is smaller, or others
//    fill it): before each write the writer asks it (statvfs) how much is
//    free, and keeps our files within their bytes plus that free space, less
//    one block left free; it evicts LRU files to stay there instead of
//    failing. With no room for even one block, writes pause (the block is
//    dropped, writes_enabled reads false, logged once) and resume by
//    themselves at the first write that finds room again (logged).
//  - A write failing with ENOSPC all the same (someone filled the disk since
//    the check): evict our least recently used files to make room for one
//    block and retry once; if that fails too, or any other write error:
//    writes are disabled for the rest of the run (queued blocks are dropped),
//    loads of what is on disk go on. Logged once.
//
// Thread-safety: every public method may be called from any thread. Internals:
// one mutex guards the index, the queues and the stats; file I/O runs outside
// it. The destructor stops accepting work, lets the writer drain the queued
// blocks (bounded by max_pending_writes), completes queued load requests as
// cancelled (n_loaded() == 0), waits for the one in progress, and joins.
#pragma once

#include <fmt/format.h>

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/disk_block_file.h"

namespace omnibus {

// Test seams, called on the writer or I/O thread (nullptr / empty: none).
struct DiskTierTestHooks {
  // Before writing block `key`: an errno to fail the write with (0: write).
  std::function<int(uint64_t key)> write_errno;
  // The file system's free bytes for the tier (default: statvfs of the
  // directory, f_bavail * f_frsize; unknown: no bound).
  std::function<uint64_t()> free_bytes;
  // After the header of block `key` is in its temp file, before the payload
  // (a test may block here, or be killed here: a write cut short).
  std::function<void(uint64_t key)> mid_write;
  // On the I/O thread, before reading a load request whose first block is
  // `key` (a test may block here: a slow disk).
  std::function<void(uint64_t key)> before_load;
};

struct DiskTierConfig {
  std::string dir;                  // --kv-offload-dir; created if missing
  uint64_t max_bytes = 8ull << 30;  // --kv-offload-size: this namespace's files, headers included
  DiskTierNamespace ns;             // REQUIRES: ns.valid()
  size_t max_pending_writes = 64;   // the write queue's bound, in blocks
  bool log = true;                  // log lines on stderr
  DiskTierTestHooks hooks;
};

// One block to store: its chain key, its parent's, its block_size tokens and
// its payload (ns.block_bytes).
struct DiskBlock {
  uint64_t key = 0;
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
};

// One block to load: what the loader expects; the file must agree exactly.
struct DiskLoadItem {
  uint64_t key = 0;
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
};

// Counters for /metrics; a snapshot.
struct DiskTierStats {
  // Load latency buckets (upper bounds, seconds), one block read + verified:
  static constexpr std::array<double, 8> kLatencyBounds = {0.0005, 0.001, 0.002, 0.005,
                                                           0.01,   0.02,  0.05,  0.1};
  bool enabled = false;         // the tier works at all
  bool writes_enabled = false;  // false while the file system has no room for a block, and
                                // for good after a write failure (loads go on)
  uint64_t hits = 0;            // blocks loaded and verified
  uint64_t misses = 0;          // blocks asked for and not loaded (incl. after a chain break)
  uint64_t blocks_written = 0;
  uint64_t bytes_written = 0;       // file bytes, headers included
  uint64_t bytes_read = 0;          // payload bytes of hits
  uint64_t write_drops = 0;         // store() refused: queue full
  uint64_t write_errors = 0;        // writes that failed (before a retry)
  uint64_t skipped_corrupt = 0;     // files found bad: bad magic, checksum, fields
  uint64_t skipped_truncated = 0;   // files shorter than their header says
  uint64_t skipped_foreign = 0;     // another namespace / version, or not a regular file
  uint64_t mismatches = 0;          // a key whose file holds other tokens or parent
  uint64_t temp_files_removed = 0;  // writes a kill cut short, found at start-up
  uint64_t evictions = 0;           // files deleted to stay under max_bytes
  uint64_t load_latency_count = 0;
  double load_latency_sum_s = 0;
  std::array<uint64_t, kLatencyBounds.size() + 1> load_latency_buckets{};  // last: +Inf
  uint64_t bytes_on_disk = 0;  // indexed files of this namespace
  uint64_t entries = 0;
};

// A load request's completion. Written by the I/O thread, then done.
class DiskLoad {
 public:
  explicit DiskLoad(int32_t n_requested, size_t block_bytes)
      : n_requested_(n_requested), block_bytes_(block_bytes) {}

  int32_t n_requested() const { return n_requested_; }
  bool done() const;  // non-blocking
  void wait() const;  // until done (condition variable)
  // REQUIRES: done(). Blocks [0, n_loaded()) of the request were read and
  // verified; the rest were not (a miss, a bad file, or cancelled).
  int32_t n_loaded() const;
  // REQUIRES: done(), 0 <= i < n_loaded(). ns.block_bytes bytes.
  std::span<const uint8_t> payload(int32_t i) const;

 private:
  friend class DiskTier;
  void finish(int32_t n_loaded);

  const int32_t n_requested_;
  const size_t block_bytes_;
  std::vector<uint8_t> data_;  // [n_loaded * block_bytes]; I/O thread until done
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  int32_t n_loaded_ = 0;
};

class DiskTier {
 public:
  // Never fails: a tier that cannot work is returned disabled (enabled() ==
  // false; stats() says so; a log line says why).
  explicit DiskTier(DiskTierConfig config);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  bool enabled() const { return enabled_; }
  const DiskTierNamespace& ns() const { return config_.ns; }
  // The namespace's directory: <dir>/<ns.dir_name()>.
  const std::string& ns_dir() const { return ns_dir_; }

  // Queues `block` for writing; false when not queued (disabled, writes off,
  // queue full: counted in write_drops, or already on disk / queued).
  // Never blocks on I/O. REQUIRES: tokens.size() == block_size,
  // payload.size() == block_bytes.
  bool store(DiskBlock block);

  // Whether `key` is on disk (indexed); no I/O, no LRU change.
  bool contains(uint64_t key) const;
  // The number of leading keys that are on disk (a run from keys[0]).
  int32_t lookup(std::span<const uint64_t> keys) const;

  // Reads the chain `items` in order on the I/O thread; see the header
  // comment. `on_done`, if any, runs on the I/O thread after the DiskLoad is
  // done (keep it short: wake the engine). Disabled: returned done, 0 loaded.
  std::shared_ptr<const DiskLoad> request_load(std::vector<DiskLoadItem> items,
                                               std::function<void()> on_done = {});
  // Reads one block into `dst` on the caller's thread. True on a verified
  // hit. REQUIRES: dst.size() == block_bytes.
  bool load(const DiskLoadItem& item, std::span<uint8_t> dst);

  // Waits until every block queued before the call is written (or dropped);
  // blocks other threads queue meanwhile are not waited for.
  void flush();

  DiskTierStats stats() const;
  // Aborts unless: the LRU list and the index hold the same keys,
  // bytes_on_disk is the sum of the indexed files' sizes, and the blocks
  // queued but not done are the queue plus at most the one being written,
  // each with its key in queued_keys_.
  void check_integrity() const;

 private:
  struct Entry {
    uint64_t bytes = 0;
    std::list<uint64_t>::iterator lru;  // into lru_
  };
  struct LoadJob {
    std::vector<DiskLoadItem> items;
    std::shared_ptr<DiskLoad> load;
    std::function<void()> on_done;
  };

  bool open_dir();  // false: disabled (logged)
  void scan_dir();  // rebuilds the index
  void writer_loop();
  void reader_loop();
  // Writes one block file; 0 or the errno.
  int write_file(const DiskBlock& b, uint64_t* file_bytes);
  void write_one(DiskBlock b);
  bool load_one(const DiskLoadItem& item, std::span<uint8_t> dst);
  std::string block_path(uint64_t key) const;
  std::string temp_path(uint64_t key) const;
  // REQUIRES: mu_ held. Insert / refresh / remove an index entry.
  void index_insert_locked(uint64_t key, uint64_t bytes);
  void index_erase_locked(uint64_t key);
  // REQUIRES: mu_ held. Deletes LRU files until bytes_on_disk + incoming <= limit.
  void evict_locked(uint64_t incoming, uint64_t limit);
  // The file system's free bytes (hooks.free_bytes, else statvfs); no lock.
  uint64_t fs_free_bytes() const;
  // REQUIRES: mu_ held. Evicts LRU files so that `need` more bytes stay
  // within max_bytes and the file system's room; false (and fs_full_, logged
  // on each change) when not even one block fits.
  bool make_room_locked(uint64_t need, uint64_t free_bytes);
  void count_bad_locked(DiskBlockCheck c);
  template <class... Args>
  void log(fmt::format_string<Args...> f, Args&&... args) const;

  // Constant after construction.
  const DiskTierConfig config_;
  const uint64_t header_bytes_;  // of every file of this namespace
  std::string ns_dir_;
  bool enabled_ = false;
  int lock_fd_ = -1;

  mutable std::mutex mu_;
  std::condition_variable write_cv_;  // writer: work or stop
  std::condition_variable flush_cv_;  // flush(): n_done_ advanced
  std::condition_variable read_cv_;   // reader: work or stop
  // Guarded by mu_.
  bool stopping_ = false;
  bool writes_enabled_ = false;
  bool fs_full_ = false;   // the last write found no room for a block: paused
  uint64_t n_queued_ = 0;  // blocks ever queued
  uint64_t n_done_ = 0;    // of those, written or dropped by the writer
  std::deque<DiskBlock> write_queue_;
  std::unordered_set<uint64_t> queued_keys_;
  std::deque<LoadJob> load_queue_;
  std::list<uint64_t> lru_;  // front: most recently used
  std::unordered_map<uint64_t, Entry> index_;
  DiskTierStats stats_;

  std::thread writer_;
  std::thread reader_;
};

}  // namespace omnibus
