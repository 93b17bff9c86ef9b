/* A fake CUDA runtime (libcudart.so.13): like the real one, every call forwards to the
 * driver API, so a launch through the runtime reaches cuLaunchKernel. */
#include "fake_cuda.h"

#define NOINLINE __attribute__((noinline, visibility("default")))

typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };

static int context_ready;

static void ensure_context(void) {
    if (!context_ready) {
        CUcontext ctx;
        cuInit(0);
        cuDevicePrimaryCtxRetain(&ctx, 0);
        context_ready = 1;
    }
}

NOINLINE cudaError_t cudaSetDevice(int dev) { (void)dev; ensure_context(); return 0; }

NOINLINE cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, CUstream stream) {
    ensure_context();
    return cuLaunchKernel((CUfunction)func, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shmem, stream, args, 0);
}

NOINLINE cudaError_t cudaGraphLaunch(CUgraphExec g, CUstream s) { ensure_context(); return cuGraphLaunch(g, s); }

NOINLINE cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    ensure_context();
    switch (kind) {
    case cudaMemcpyHostToDevice: return cuMemcpyHtoD_v2((CUdeviceptr)dst, src, n);
    case cudaMemcpyDeviceToHost: return cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, n);
    case cudaMemcpyDeviceToDevice: return cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, n);
    default: return cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n);
    }
}

NOINLINE cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, CUstream s) {
    ensure_context();
    switch (kind) {
    case cudaMemcpyHostToDevice: return cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, n, s);
    case cudaMemcpyDeviceToHost: return cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)src, n, s);
    case cudaMemcpyDeviceToDevice: return cuMemcpyDtoDAsync_v2((CUdeviceptr)dst, (CUdeviceptr)src, n, s);
    default: return cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, s);
    }
}

NOINLINE cudaError_t cudaStreamSynchronize(CUstream s) { return cuStreamSynchronize(s); }
/* CUDA 13's runtime reaches the _v2 entry point (seen with PyTorch on driver 580). */
NOINLINE cudaError_t cudaDeviceSynchronize(void) { return cuCtxSynchronize_v2(0); }
NOINLINE cudaError_t cudaMalloc(void **p, size_t n) { ensure_context(); return cuMemAlloc_v2((CUdeviceptr *)p, n); }
NOINLINE cudaError_t cudaFree(void *p) { return cuMemFree_v2((CUdeviceptr)p); }
NOINLINE cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) { ensure_context(); return cuMemHostAlloc(p, n, flags); }
NOINLINE cudaError_t cudaMallocHost(void **p, size_t n) { ensure_context(); return cuMemAllocHost_v2(p, n); }
NOINLINE cudaError_t cudaFreeHost(void *p) { return cuMemFreeHost(p); }
NOINLINE cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) { return cuMemHostRegister_v2(p, n, flags); }
