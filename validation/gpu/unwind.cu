// A native CUDA training loop built with plain `nvcc -O2` (no frame-pointer flags: the host
// compiler omits them), with three planted problems in named C++ functions for issue 33's
// check that gputrace names them by unwinding with the call frame information:
//   trainer::prepare_batch  ~3 ms of host work per step, the GPU idle meanwhile (host-bound)
//   trainer::read_loss      a 4-byte device-to-host cudaMemcpy per step (host-sync)
//   trainer::grow_cache     a 1 MiB cudaMalloc per step, never freed (memory-growth)
// Usage: unwind_job [--seconds S] [--blocking]   (--blocking: the sync sleeps instead of
// spinning, cudaDeviceScheduleBlockingSync). Prints "steps N steps_per_s X" at the end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

__global__ void step_kernel(float *acc, long long spin_cycles) {
    long long start = clock64();
    while (clock64() - start < spin_cycles) {}
    if (threadIdx.x == 0) acc[0] += 1.0f;
}

namespace trainer {

__attribute__((noinline)) double prepare_batch(std::vector<double> &batch) {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(3000);
    double sum = 0;
    while (std::chrono::steady_clock::now() < until) {
        for (size_t i = 0; i < batch.size(); i++) {
            batch[i] = batch[i] * 1.0000001 + 0.5;
            sum += batch[i];
        }
    }
    return sum;
}

__attribute__((noinline)) float read_loss(const float *device_loss) {
    float loss = 0;
    CHECK(cudaMemcpy(&loss, device_loss, sizeof loss, cudaMemcpyDeviceToHost));
    return loss * 0.5f;  // used after the call: no tail call
}

__attribute__((noinline)) void *grow_cache(size_t bytes) {
    void *p = nullptr;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

}  // namespace trainer

int main(int argc, char **argv) {
    double seconds = 8;
    bool blocking = false;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = std::atof(argv[++i]);
        else if (!std::strcmp(argv[i], "--blocking")) blocking = true;
    }
    if (blocking) CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    float *acc;
    CHECK(cudaMalloc(&acc, sizeof(float)));
    CHECK(cudaMemset(acc, 0, sizeof(float)));
    std::vector<double> batch(4096, 1.0);
    std::vector<void *> kept;
    double checksum = 0;
    auto start = std::chrono::steady_clock::now();
    long steps = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
        checksum += trainer::prepare_batch(batch);
        step_kernel<<<1, 32>>>(acc, 5'000'000);  // ~3 ms at ~1.8 GHz
        CHECK(cudaGetLastError());
        checksum += trainer::read_loss(acc);
        if (kept.size() < 4096) kept.push_back(trainer::grow_cache(1 << 20));
        steps++;
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("steps %ld steps_per_s %.1f checksum %g\n", steps, steps / elapsed, checksum);
    for (void *p : kept) cudaFree(p);
    return 0;
}
