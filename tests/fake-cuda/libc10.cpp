// A fake of PyTorch's libc10.so: the profiler hook its caching allocator reports every block
// to, with the real one's name and signature (exported, as in the real library). gputrace
// probes its entry (gputrace_common::ALLOCATOR_SYMBOLS). Built with -DFAKE_OTHER_SIGNATURE,
// it takes one argument more, as a release whose signature changed would: gputrace must then
// leave it alone and say so.
#include "fake_c10.h"

namespace c10 {
#ifdef FAKE_OTHER_SIGNATURE
__attribute__((visibility("default"), noinline)) void reportMemoryUsageToProfiler(void *, int64_t, size_t, size_t, Device, int) {
#else
__attribute__((visibility("default"), noinline)) void reportMemoryUsageToProfiler(void *, int64_t, size_t, size_t, Device) {
#endif
  // Nothing listens: as in the real one without a profiler.
  asm volatile("" ::: "memory");
}
}  // namespace c10
