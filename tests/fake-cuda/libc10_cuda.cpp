// A fake of PyTorch's libc10_cuda.so: its caching allocator, which reports every block it
// hands out and takes back to c10::reportMemoryUsageToProfiler in libc10.so (the hook
// gputrace probes), with its own totals, as the real one does. A job drives it through the
// exported C functions at the end (ctypes from Python, or dlsym).
//
// Like the real allocator it carves blocks out of 2 MiB segments it reserves through the
// driver (cuMemAlloc_v2 of the fake libcuda), keeps freed blocks for reuse by size, and hands
// the same address out again; it never gives a segment back. A request it cannot meet throws,
// as the real one's out-of-memory error does.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <vector>

struct CUstream_st;
extern "C" int cuMemAlloc_v2(unsigned long long *dptr, size_t bytes);

#include "fake_c10.h"
#ifdef FAKE_OTHER_SIGNATURE
#define REPORT(ptr, size) c10::reportMemoryUsageToProfiler(ptr, size, allocated_bytes_, reserved_bytes_, c10::Device{c10::DeviceType::CUDA, 0}, 0)
#else
#define REPORT(ptr, size) c10::reportMemoryUsageToProfiler(ptr, size, allocated_bytes_, reserved_bytes_, c10::Device{c10::DeviceType::CUDA, 0})
#endif

namespace c10 {
namespace cuda {
namespace CUDACachingAllocator {
namespace Native {

class __attribute__((visibility("hidden"))) NativeCachingAllocator {
 public:
  void malloc(void **devPtr, signed char device, unsigned long size, CUstream_st *stream);
  void free(void *ptr);
  void raw_delete(void *ptr);
  // A segment of `bytes` reserved now, carved from before any new one (a warmed-up cache).
  bool reserve(unsigned long bytes);

 private:
  static constexpr unsigned long kSegment = 2ul << 20;
  std::mutex mutex_;
  std::map<unsigned long, std::vector<void *>> cached_;
  std::map<void *, unsigned long> allocated_;
  unsigned long long segment_ = 0;
  unsigned long capacity_ = 0;
  unsigned long used_ = 0;
  size_t allocated_bytes_ = 0;
  size_t reserved_bytes_ = 0;
};

bool NativeCachingAllocator::reserve(unsigned long bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  unsigned long long seg = 0;
  if (cuMemAlloc_v2(&seg, bytes) != 0) return false;
  reserved_bytes_ += bytes;
  segment_ = seg;
  capacity_ = bytes;
  used_ = 0;
  return true;
}

__attribute__((noinline)) void NativeCachingAllocator::malloc(void **devPtr, signed char, unsigned long size, CUstream_st *) {
  std::lock_guard<std::mutex> lock(mutex_);
  unsigned long rounded = (size + 511) & ~511ul;
  auto &cached = cached_[rounded];
  void *p = nullptr;
  if (!cached.empty()) {
    p = cached.back();
    cached.pop_back();
  } else {
    if (used_ + rounded > capacity_) {
      unsigned long long seg = 0;
      unsigned long grow = rounded > kSegment ? rounded : kSegment;
      if (cuMemAlloc_v2(&seg, grow) != 0) throw std::bad_alloc();
      reserved_bytes_ += grow;
      segment_ = seg;
      capacity_ = grow;
      used_ = 0;
    }
    p = reinterpret_cast<void *>(segment_ + used_);
    used_ += rounded;
  }
  allocated_[p] = rounded;
  allocated_bytes_ += rounded;
  REPORT(p, static_cast<int64_t>(rounded));
  *devPtr = p;
}

__attribute__((noinline)) void NativeCachingAllocator::free(void *ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) return;
  cached_[it->second].push_back(ptr);
  allocated_bytes_ -= it->second;
  REPORT(ptr, -static_cast<int64_t>(it->second));
  allocated_.erase(it);
}

// raw_alloc's blocks (cuBLAS workspaces) come back here; a tensor's through local_raw_delete.
__attribute__((noinline)) void NativeCachingAllocator::raw_delete(void *ptr) { this->free(ptr); }

static NativeCachingAllocator allocator;

// A tensor's deleter (its DataPtr's), as in torch: gives the block back.
__attribute__((noinline, visibility("hidden"))) void local_raw_delete(void *ptr) { allocator.free(ptr); }

}  // namespace Native
}  // namespace CUDACachingAllocator
}  // namespace cuda
}  // namespace c10

using c10::cuda::CUDACachingAllocator::Native::allocator;

// What a tensor's creation and destruction do: one block each. Exported for the job. A
// request the allocator cannot meet throws through malloc and is caught here (as Python's
// `except torch.OutOfMemoryError` catches the real one): null.
extern "C" __attribute__((visibility("default"))) void *fake_tensor_alloc(unsigned long bytes) {
  void *p = nullptr;
  try {
    allocator.malloc(&p, 0, bytes, nullptr);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
  return p;
}

extern "C" __attribute__((visibility("default"))) int fake_allocator_reserve(unsigned long bytes) { return allocator.reserve(bytes) ? 0 : 1; }

extern "C" __attribute__((visibility("default"))) void fake_tensor_free(void *p) { c10::cuda::CUDACachingAllocator::Native::local_raw_delete(p); }
