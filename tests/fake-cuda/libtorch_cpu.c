/* A stand-in for PyTorch's CPU library (libtorch_cpu.so): a tensor op that computes on the
 * host, as torch.stack or a transform of a CPU tensor does, for jobs that make their batches
 * through the framework on the training thread (fakejob --torch-prep-us). Its object's name is
 * what gputrace's dispatch view keys on (tracer-analysis/src/detect/whatif/dispatch.rs): a
 * sample in it is the framework's, whether the framework is launching or computing. */
#include <stdint.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* `us` µs of arithmetic, as a CPU kernel's inner loop is. Named after ATen's CPU kernels. */
__attribute__((noinline, visibility("default"))) void at_native_cpu_stack_kernel(long us) {
    uint64_t until = now_ns() + (uint64_t)us * 1000;
    volatile unsigned long sink = 0;
    while (now_ns() < until) {
        for (int i = 0; i < 4096; i++) sink += (unsigned long)i * 3u;
    }
}
