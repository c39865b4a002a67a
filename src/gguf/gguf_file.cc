#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "gguf/gguf_parser.h"
#include "util/check.h"

namespace omnibus {

namespace {
constexpr std::align_val_t kCopyAlignment{64};
}  // namespace

StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::not_found("{}: no such file", path);
    return Status::io("{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::io("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::io("{}: not a regular file", path);
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::io("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(err));
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  OMNIBUS_RETURN_IF_ERROR(GgufParser::parse(f.get()));
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::from_bytes(const uint8_t* data, size_t size,
                                                         std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  uint8_t* copy = static_cast<uint8_t*>(::operator new(size == 0 ? 1 : size, kCopyAlignment));
  if (size > 0) std::memcpy(copy, data, size);
  f->base_ = copy;
  f->size_ = size;
  OMNIBUS_RETURN_IF_ERROR(GgufParser::parse(f.get()));
  return f;
}

GgufFile::~GgufFile() {
  if (base_ == nullptr) return;
  if (mapped_) {
    ::munmap(const_cast<uint8_t*>(base_), size_);
  } else {
    ::operator delete(const_cast<uint8_t*>(base_), kCopyAlignment);
  }
}

void GgufFile::release_pages(const void* data, size_t n_bytes) const {
  const auto* p = static_cast<const uint8_t*>(data);
  OMNIBUS_CHECK(p >= base_ && n_bytes <= size_ && uint64_t(p - base_) <= size_ - n_bytes);
  if (!mapped_) return;
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(p) + n_bytes) / page * page;
  if (begin >= end) return;
  // Cannot fail on a page-aligned range of this object's own mapping.
  const int rc = ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  OMNIBUS_CHECK(rc == 0);
}

const GgufKv* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace omnibus
