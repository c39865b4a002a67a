#include "kv/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "util/check.h"

namespace omnibus {

namespace {

// Writes all of b; 0 or the errno.
int write_full(int fd, const uint8_t* b, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, b + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    if (w == 0) return EIO;
    done += size_t(w);
  }
  return 0;
}

// A new, empty regular file at `path`, open for writing; -1 with errno set.
// Whatever had the name goes first: O_EXCL | O_NOFOLLOW never opens an
// existing FIFO (whose open would wait for a reader), device or symlink.
int create_new_file(const std::string& path) {
  ::unlink(path.c_str());
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                0600);
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "<16 hex digits>.kvb" -> key.
bool parse_block_name(const std::string& name, uint64_t* key) {
  if (name.size() != 16 + 4 || !ends_with(name, ".kvb")) return false;
  const auto r = std::from_chars(name.data(), name.data() + 16, *key, 16);
  return r.ec == std::errc() && r.ptr == name.data() + 16;
}

}  // namespace

// ---- DiskLoad ----

bool DiskLoad::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void DiskLoad::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

int32_t DiskLoad::n_loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  OMNIBUS_CHECK(done_);
  return n_loaded_;
}

std::span<const uint8_t> DiskLoad::payload(int32_t i) const {
  OMNIBUS_CHECK(i >= 0 && i < n_loaded());
  return std::span<const uint8_t>(data_).subspan(size_t(i) * block_bytes_, block_bytes_);
}

void DiskLoad::finish(int32_t n_loaded) {
  OMNIBUS_CHECK(n_loaded >= 0 && n_loaded <= n_requested_);
  OMNIBUS_CHECK(data_.size() == size_t(n_loaded) * block_bytes_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    n_loaded_ = n_loaded;
    done_ = true;
  }
  cv_.notify_all();
}

// ---- DiskTier: start-up ----

template <class... Args>
void DiskTier::log(fmt::format_string<Args...> f, Args&&... args) const {
  if (!config_.log) return;
  std::fprintf(stderr, "omnibus: disk tier %s: %s\n", ns_dir_.c_str(),
               fmt::format(f, std::forward<Args>(args)...).c_str());
}

DiskTier::DiskTier(DiskTierConfig config)
    : config_(std::move(config)),
      header_bytes_(kDiskBlockFixedHeader + 4 * uint64_t(std::max(config_.ns.block_size, 0)) + 16) {
  ns_dir_ = config_.dir + "/" + config_.ns.dir_name();
  if (!config_.ns.valid() || config_.dir.empty()) {
    log("disabled: invalid namespace or empty directory");
    return;
  }
  if (!open_dir()) return;
  scan_dir();
  enabled_ = true;
  writes_enabled_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    evict_locked(0, config_.max_bytes);  // the limit may have shrunk since the last run
  }
  writer_ = std::thread([this] { writer_loop(); });
  reader_ = std::thread([this] { reader_loop(); });
}

bool DiskTier::open_dir() {
  std::error_code ec;
  std::filesystem::create_directories(ns_dir_, ec);
  if (ec || !std::filesystem::is_directory(ns_dir_, ec)) {
    log("disabled: cannot create the directory: {}", ec ? ec.message() : "not a directory");
    return false;
  }
  // The blocks are other tenants' KV: only this user may read them or plant
  // new ones (checksums catch corruption, not a well-formed forgery).
  std::filesystem::permissions(ns_dir_, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec)
    log("cannot make {} private ({}); other users may read its blocks", ns_dir_, ec.message());
  const std::string lock_path = ns_dir_ + "/LOCK";
  lock_fd_ =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0600);
  if (lock_fd_ < 0) {
    log("disabled: cannot open {}: {}", lock_path, std::strerror(errno));
    return false;
  }
  if (struct stat st; ::fstat(lock_fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    log("disabled: {} is not a regular file", lock_path);
    ::close(lock_fd_);
    lock_fd_ = -1;
    return false;
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    log("disabled: {} is locked by another server ({})", lock_path, std::strerror(errno));
    ::close(lock_fd_);
    lock_fd_ = -1;
    return false;
  }
  // A probe write: a read-only or full file system disables the tier now,
  // not at the first eviction.
  const std::string probe = ns_dir_ + "/probe.tmp";
  const int fd = create_new_file(probe);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    const std::vector<uint8_t> bytes(header_bytes_, 0);
    err = write_full(fd, bytes.data(), bytes.size());
    if (::close(fd) != 0 && err == 0) err = errno;
    ::unlink(probe.c_str());
  }
  if (err != 0) {
    log("disabled: cannot write in the directory: {}", std::strerror(err));
    return false;
  }
  return true;
}

void DiskTier::scan_dir() {
  struct Found {
    uint64_t key, bytes;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  DIR* d = ::opendir(ns_dir_.c_str());
  if (d == nullptr) return;  // open_dir just made it: only a race removes it
  std::lock_guard<std::mutex> lock(mu_);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string path = ns_dir_ + "/" + name;
    if (ends_with(name, ".tmp")) {
      ::unlink(path.c_str());
      stats_.temp_files_removed++;
      log("removed {}: a write cut short", name);
      continue;
    }
    if (!ends_with(name, ".kvb")) continue;  // LOCK, ., .., a user's files
    uint64_t key = 0;
    DiskBlockHeader h;
    DiskBlockCheck c = read_disk_block_header(path, config_.ns, &h);
    if (c == DiskBlockCheck::kOk && (!parse_block_name(name, &key) || h.key != key)) {
      c = DiskBlockCheck::kCorrupt;  // a file whose name is not its key
    }
    if (c != DiskBlockCheck::kOk) {
      count_bad_locked(c);
      const bool ours = c == DiskBlockCheck::kCorrupt || c == DiskBlockCheck::kTruncated;
      if (ours) ::unlink(path.c_str());
      log("skipped {}: {}{}", name, disk_block_check_name(c), ours ? " (deleted)" : "");
      continue;
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;
    found.push_back(
        {key, uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  for (const Found& f : found) index_insert_locked(f.key, f.bytes);  // newest ends in front
}

DiskTier::~DiskTier() {
  std::deque<LoadJob> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cancelled.swap(load_queue_);
    for (const LoadJob& j : cancelled) stats_.misses += j.items.size();
  }
  write_cv_.notify_all();
  read_cv_.notify_all();
  for (LoadJob& j : cancelled) {
    j.load->finish(0);
    if (j.on_done) j.on_done();
  }
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

// ---- index (mu_ held) ----

std::string DiskTier::block_path(uint64_t key) const {
  return fmt::format("{}/{:016x}.kvb", ns_dir_, key);
}
std::string DiskTier::temp_path(uint64_t key) const {
  return fmt::format("{}/{:016x}.tmp", ns_dir_, key);
}

void DiskTier::index_insert_locked(uint64_t key, uint64_t bytes) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    stats_.bytes_on_disk = stats_.bytes_on_disk - it->second.bytes + bytes;
    it->second.bytes = bytes;
    return;
  }
  lru_.push_front(key);
  index_.emplace(key, Entry{bytes, lru_.begin()});
  stats_.bytes_on_disk += bytes;
  stats_.entries = index_.size();
}

void DiskTier::index_erase_locked(uint64_t key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  stats_.bytes_on_disk -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  stats_.entries = index_.size();
}

void DiskTier::evict_locked(uint64_t incoming, uint64_t limit) {
  while (!lru_.empty() && stats_.bytes_on_disk + incoming > limit) {
    const uint64_t key = lru_.back();
    ::unlink(block_path(key).c_str());
    index_erase_locked(key);
    stats_.evictions++;
  }
}

void DiskTier::count_bad_locked(DiskBlockCheck c) {
  switch (c) {
    case DiskBlockCheck::kCorrupt:
      stats_.skipped_corrupt++;
      break;
    case DiskBlockCheck::kTruncated:
      stats_.skipped_truncated++;
      break;
    case DiskBlockCheck::kForeign:
    case DiskBlockCheck::kNotRegular:  // not ours either
      stats_.skipped_foreign++;
      break;
    case DiskBlockCheck::kMismatch:
      stats_.mismatches++;
      break;
    default:
      break;
  }
}

// ---- writes ----

bool DiskTier::store(DiskBlock block) {
  OMNIBUS_CHECK(block.tokens.size() == size_t(config_.ns.block_size));
  OMNIBUS_CHECK(block.payload.size() == config_.ns.block_bytes);
  if (!enabled_) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    if (!writes_enabled_) {
      stats_.write_drops++;
      return false;
    }
    auto it = index_.find(block.key);
    if (it != index_.end()) {  // on disk already: just recently used again
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return false;
    }
    if (queued_keys_.count(block.key) != 0) return false;
    if (write_queue_.size() >= config_.max_pending_writes) {
      stats_.write_drops++;
      return false;
    }
    queued_keys_.insert(block.key);
    write_queue_.push_back(std::move(block));
    n_queued_++;
  }
  write_cv_.notify_one();
  return true;
}

void DiskTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    write_cv_.wait(lock, [&] { return stopping_ || !write_queue_.empty(); });
    if (write_queue_.empty()) break;  // stopping, drained
    DiskBlock b = std::move(write_queue_.front());
    write_queue_.pop_front();
    lock.unlock();
    const uint64_t key = b.key;
    write_one(std::move(b));
    lock.lock();
    queued_keys_.erase(key);  // after write_one indexed it: never neither
    n_done_++;
    flush_cv_.notify_all();
  }
}

int DiskTier::write_file(const DiskBlock& b, uint64_t* file_bytes) {
  if (config_.hooks.write_errno) {
    if (const int err = config_.hooks.write_errno(b.key); err != 0) return err;
  }
  DiskBlockHeader h;
  h.ns = config_.ns;
  h.key = b.key;
  h.parent = b.parent;
  h.tokens = b.tokens;
  h.payload_checksum = disk_block_payload_checksum(b.payload);
  const std::vector<uint8_t> header = encode_disk_block_header(h);
  OMNIBUS_CHECK(header.size() == header_bytes_);
  const std::string tmp = temp_path(b.key);
  const int fd = create_new_file(tmp);
  if (fd < 0) return errno;
  int err = write_full(fd, header.data(), header.size());
  if (err == 0 && config_.hooks.mid_write) config_.hooks.mid_write(b.key);
  if (err == 0) err = write_full(fd, b.payload.data(), b.payload.size());
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), block_path(b.key).c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return err;
  }
  *file_bytes = header.size() + b.payload.size();
  return 0;
}

uint64_t DiskTier::fs_free_bytes() const {
  if (config_.hooks.free_bytes) return config_.hooks.free_bytes();
  struct statvfs fs;
  if (::statvfs(ns_dir_.c_str(), &fs) != 0) return UINT64_MAX;
  return uint64_t(fs.f_bavail) * fs.f_frsize;
}

bool DiskTier::make_room_locked(uint64_t need, uint64_t free_bytes) {
  // What the file system lets us hold: our files plus its free space, less
  // one block left free for everyone else.
  const uint64_t room = free_bytes > UINT64_MAX - stats_.bytes_on_disk
                            ? UINT64_MAX
                            : stats_.bytes_on_disk + free_bytes;
  const uint64_t limit = std::min(config_.max_bytes, room > need ? room - need : 0);
  const bool full = limit < need;
  if (full != fs_full_) {
    fs_full_ = full;
    if (full)
      log("writes paused: the file system has no room for a block ({} bytes free)", free_bytes);
    if (!full) log("writes resumed: the file system has room again");
  }
  if (!full) evict_locked(need, limit);
  return !full;
}

void DiskTier::write_one(DiskBlock b) {
  const uint64_t need = header_bytes_ + config_.ns.block_bytes;
  const uint64_t free_bytes = fs_free_bytes();  // a syscall: outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writes_enabled_ || need > config_.max_bytes || !make_room_locked(need, free_bytes)) {
      stats_.write_drops++;
      return;
    }
  }
  uint64_t bytes = 0;
  int err = write_file(b, &bytes);
  if (err == ENOSPC) {
    // The file system is fuller than our limit allows for: make room for one
    // block from our own LRU end and retry once.
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.write_errors++;
      uint64_t freed = 0;
      while (!lru_.empty() && freed < need) {
        const uint64_t victim = lru_.back();
        freed += index_.at(victim).bytes;
        ::unlink(block_path(victim).c_str());
        index_erase_locked(victim);
        stats_.evictions++;
      }
    }
    err = write_file(b, &bytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (err != 0) {
    stats_.write_errors++;
    stats_.write_drops++;
    writes_enabled_ = false;
    log("writes disabled after a failed write: {}; loads go on", std::strerror(err));
    // Blocks still queued are dropped by later write_one calls (counted).
    return;
  }
  index_insert_locked(b.key, bytes);
  stats_.blocks_written++;
  stats_.bytes_written += bytes;
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = n_queued_;
  flush_cv_.wait(lock, [&] { return n_done_ >= target; });
}

// ---- lookups and loads ----

bool DiskTier::contains(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0;
}

int32_t DiskTier::lookup(std::span<const uint64_t> keys) const {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t n = 0;
  while (size_t(n) < keys.size() && index_.count(keys[size_t(n)]) != 0) n++;
  return n;
}

bool DiskTier::load_one(const DiskLoadItem& item, std::span<uint8_t> dst) {
  OMNIBUS_CHECK(dst.size() == config_.ns.block_bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!enabled_ || index_.count(item.key) == 0) {
      stats_.misses++;
      return false;
    }
  }
  const std::string path = block_path(item.key);
  const auto t0 = std::chrono::steady_clock::now();
  const DiskBlockCheck c =
      read_disk_block(path, config_.ns, item.key, item.parent, item.tokens, dst);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (c == DiskBlockCheck::kOk) {
      stats_.hits++;
      stats_.bytes_read += dst.size();
      stats_.load_latency_count++;
      stats_.load_latency_sum_s += seconds;
      size_t b = 0;
      while (b < DiskTierStats::kLatencyBounds.size() && seconds > DiskTierStats::kLatencyBounds[b])
        b++;
      stats_.load_latency_buckets[b]++;
      auto it = index_.find(item.key);
      if (it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second.lru);
    } else {
      stats_.misses++;
      count_bad_locked(c);
      // A bad file of ours is deleted; a foreign one (replaced behind our
      // back) is left alone; either way it leaves the index. A mismatch is
      // a collision: the file is fine for its own tokens.
      const bool bad = c == DiskBlockCheck::kCorrupt || c == DiskBlockCheck::kTruncated;
      if (c != DiskBlockCheck::kMismatch && index_.count(item.key) != 0) {
        if (bad) ::unlink(path.c_str());
        index_erase_locked(item.key);
      }
      if (c != DiskBlockCheck::kMissing) {
        log("load of {:016x} failed: {}{}", item.key, disk_block_check_name(c),
            bad ? " (deleted)" : "");
      }
    }
  }
  // The mtime keeps the LRU order for the next start-up.
  if (c == DiskBlockCheck::kOk) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return c == DiskBlockCheck::kOk;
}

bool DiskTier::load(const DiskLoadItem& item, std::span<uint8_t> dst) {
  return load_one(item, dst);
}

std::shared_ptr<const DiskLoad> DiskTier::request_load(std::vector<DiskLoadItem> items,
                                                       std::function<void()> on_done) {
  auto load = std::make_shared<DiskLoad>(int32_t(items.size()), size_t(config_.ns.block_bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (enabled_ && !stopping_ && !items.empty()) {
      load_queue_.push_back(LoadJob{std::move(items), load, std::move(on_done)});
      read_cv_.notify_one();
      return load;
    }
    stats_.misses += items.size();
  }
  load->finish(0);
  if (on_done) on_done();
  return load;
}

void DiskTier::reader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    read_cv_.wait(lock, [&] { return stopping_ || !load_queue_.empty(); });
    if (stopping_) break;  // the destructor cancels what is queued
    LoadJob job = std::move(load_queue_.front());
    load_queue_.pop_front();
    lock.unlock();
    if (config_.hooks.before_load && !job.items.empty())
      config_.hooks.before_load(job.items.front().key);
    const size_t bb = config_.ns.block_bytes;
    const size_t n = job.items.size();
    size_t i = 0;
    for (; i < n; i++) {
      job.load->data_.resize((i + 1) * bb);
      if (!load_one(job.items[i], std::span<uint8_t>(job.load->data_).subspan(i * bb, bb))) {
        job.load->data_.resize(i * bb);
        break;
      }
    }
    lock.lock();
    if (i < n) stats_.misses += n - i - 1;  // the blocks after the break; load_one counted its own
    lock.unlock();
    job.load->finish(int32_t(i));
    if (job.on_done) job.on_done();
    lock.lock();
  }
}

// ---- stats ----

DiskTierStats DiskTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskTierStats s = stats_;
  s.enabled = enabled_;
  s.writes_enabled = enabled_ && writes_enabled_ && !fs_full_;
  return s;
}

void DiskTier::check_integrity() const {
  std::lock_guard<std::mutex> lock(mu_);
  OMNIBUS_CHECK(lru_.size() == index_.size());
  OMNIBUS_CHECK(stats_.entries == index_.size());
  uint64_t bytes = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    auto e = index_.find(*it);
    OMNIBUS_CHECK(e != index_.end());
    OMNIBUS_CHECK(e->second.lru == it);
    bytes += e->second.bytes;
  }
  OMNIBUS_CHECK(bytes == stats_.bytes_on_disk);
  const uint64_t pending = n_queued_ - n_done_;
  OMNIBUS_CHECK(n_done_ <= n_queued_);
  OMNIBUS_CHECK(pending == write_queue_.size() || pending == write_queue_.size() + 1);
  OMNIBUS_CHECK(queued_keys_.size() == pending);
}

}  // namespace omnibus
