// What the fake libc10.so and libc10_cuda.so share: c10::Device as PyTorch lays it out (a
// device type and an index, a byte each), and the profiler hook's declaration, with the real
// signature or, under -DFAKE_OTHER_SIGNATURE, one argument more (another release's).
#pragma once
#include <cstddef>
#include <cstdint>

namespace c10 {
enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
struct Device {
  DeviceType type;
  int8_t index;
};
#ifdef FAKE_OTHER_SIGNATURE
__attribute__((visibility("default"))) void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved, Device device, int);
#else
__attribute__((visibility("default"))) void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved, Device device);
#endif
}  // namespace c10
