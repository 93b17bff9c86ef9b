/* A fake CUDA runtime (libcudart.so.13): like the real one, every call forwards to the
 * driver API, so a launch through the runtime reaches cuLaunchKernel. */
#include "fake_cuda.h"

#define NOINLINE __attribute__((noinline, visibility("default")))

typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
/* cuda_runtime_api.h / driver_types.h (CUDA 13). */
struct cudaPos { size_t x, y, z; };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };
struct cudaExtent { size_t width, height, depth; };
struct cudaMemcpy3DParms {
    CUarray srcArray;
    struct cudaPos srcPos;
    struct cudaPitchedPtr srcPtr;
    CUarray dstArray;
    struct cudaPos dstPos;
    struct cudaPitchedPtr dstPtr;
    struct cudaExtent extent;
    enum cudaMemcpyKind kind;
};

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

/* The driver's memory types for a runtime copy kind; cudaMemcpyDefault leaves both to the
 * driver's unified addressing. */
static void kind_types(enum cudaMemcpyKind kind, CUmemorytype *src, CUmemorytype *dst) {
    int src_host = kind == cudaMemcpyHostToHost || kind == cudaMemcpyHostToDevice;
    int dst_host = kind == cudaMemcpyHostToHost || kind == cudaMemcpyDeviceToHost;
    *src = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : src_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    *dst = kind == cudaMemcpyDefault ? CU_MEMORYTYPE_UNIFIED : dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
}

static CUDA_MEMCPY2D params_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                               enum cudaMemcpyKind kind) {
    CUDA_MEMCPY2D p = {0};
    kind_types(kind, &p.srcMemoryType, &p.dstMemoryType);
    if (p.srcMemoryType == CU_MEMORYTYPE_HOST) p.srcHost = src; else p.srcDevice = (CUdeviceptr)src;
    if (p.dstMemoryType == CU_MEMORYTYPE_HOST) p.dstHost = dst; else p.dstDevice = (CUdeviceptr)dst;
    p.srcPitch = spitch;
    p.dstPitch = dpitch;
    p.WidthInBytes = width;
    p.Height = height;
    return p;
}

NOINLINE cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                                  enum cudaMemcpyKind kind) {
    ensure_context();
    CUDA_MEMCPY2D p = params_2d(dst, dpitch, src, spitch, width, height, kind);
    return cuMemcpy2D_v2(&p);
}

NOINLINE cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                                       enum cudaMemcpyKind kind, CUstream s) {
    ensure_context();
    CUDA_MEMCPY2D p = params_2d(dst, dpitch, src, spitch, width, height, kind);
    return cuMemcpy2DAsync_v2(&p, s);
}

static CUDA_MEMCPY3D params_3d(const struct cudaMemcpy3DParms *r) {
    CUDA_MEMCPY3D p = {0};
    kind_types(r->kind, &p.srcMemoryType, &p.dstMemoryType);
    if (r->srcArray) {
        p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
        p.srcArray = r->srcArray;
    } else if (p.srcMemoryType == CU_MEMORYTYPE_HOST) {
        p.srcHost = r->srcPtr.ptr;
    } else {
        p.srcDevice = (CUdeviceptr)r->srcPtr.ptr;
    }
    if (r->dstArray) {
        p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
        p.dstArray = r->dstArray;
    } else if (p.dstMemoryType == CU_MEMORYTYPE_HOST) {
        p.dstHost = r->dstPtr.ptr;
    } else {
        p.dstDevice = (CUdeviceptr)r->dstPtr.ptr;
    }
    p.srcXInBytes = r->srcPos.x;
    p.srcY = r->srcPos.y;
    p.srcZ = r->srcPos.z;
    p.srcPitch = r->srcPtr.pitch;
    p.srcHeight = r->srcPtr.ysize;
    p.dstXInBytes = r->dstPos.x;
    p.dstY = r->dstPos.y;
    p.dstZ = r->dstPos.z;
    p.dstPitch = r->dstPtr.pitch;
    p.dstHeight = r->dstPtr.ysize;
    p.WidthInBytes = r->extent.width;
    p.Height = r->extent.height;
    p.Depth = r->extent.depth;
    return p;
}

NOINLINE cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *r) {
    ensure_context();
    CUDA_MEMCPY3D p = params_3d(r);
    return cuMemcpy3D_v2(&p);
}

NOINLINE cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *r, CUstream s) {
    ensure_context();
    CUDA_MEMCPY3D p = params_3d(r);
    return cuMemcpy3DAsync_v2(&p, s);
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
/* Streams and events forward to the driver, as the real runtime's do. */
NOINLINE cudaError_t cudaStreamCreate(CUstream *s) { ensure_context(); return cuStreamCreate(s, 0); }
NOINLINE cudaError_t cudaStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
NOINLINE cudaError_t cudaStreamQuery(CUstream s) { return cuStreamQuery(s); }
NOINLINE cudaError_t cudaStreamWaitEvent(CUstream s, CUevent e, unsigned flags) { return cuStreamWaitEvent(s, e, flags); }
NOINLINE cudaError_t cudaEventCreate(CUevent *e) { ensure_context(); return cuEventCreate(e, 0); }
NOINLINE cudaError_t cudaEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }
NOINLINE cudaError_t cudaEventRecord(CUevent e, CUstream s) { return cuEventRecord(e, s); }
NOINLINE cudaError_t cudaEventQuery(CUevent e) { return cuEventQuery(e); }
NOINLINE cudaError_t cudaEventSynchronize(CUevent e) { return cuEventSynchronize(e); }
