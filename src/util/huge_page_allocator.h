// HugePageAllocator: a std::allocator for large, long-lived buffers that are
// walked with strides of kilobytes (a prompt step's activations: a matmul
// writes a column strip of its [tokens x outputs] output per group of rows,
// one 4 KiB page per token). Allocations of 2 MiB and more are 2 MiB aligned
// and ask for transparent huge pages (madvise; best effort, the kernel's
// default THP mode only gives them on request), so such a walk costs one TLB
// entry per 2 MiB instead of one per token. Smaller ones are plain 64-byte
// aligned allocations.
//
// Thread-safety: stateless; as std::allocator.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace omnibus {

template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t(2) << 20;

  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    const size_t align = bytes >= kHugePage ? kHugePage : 64;
    void* p = nullptr;
    if (::posix_memalign(&p, align, bytes) != 0 || p == nullptr) throw std::bad_alloc();
    if (bytes >= kHugePage) ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }

  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace omnibus
