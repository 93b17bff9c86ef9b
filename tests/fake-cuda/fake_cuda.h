/* The subset of cuda.h / cuda_runtime_api.h that the fake CUDA implements, with the real
 * CUDA 13 signatures (types reduced to their ABI: handles are pointers, CUdeviceptr is a
 * 64-bit integer). Symbol names match the real libraries so the same probes attach. */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUmemPool_st *CUmemoryPool;
typedef uint64_t CUmemGenericAllocationHandle;
/* In the fake, a CUfunction points at a descriptor that says how long the kernel runs. */
typedef struct fake_kernel { uint64_t duration_ns; } *CUfunction;
typedef struct CUlaunchConfig_st {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

typedef struct CUarray_st *CUarray;
typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4,
} CUmemorytype;

/* CUDA 13 cuda.h's CUDA_MEMCPY2D_v2 and CUDA_MEMCPY3D_v2, field for field. */
typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

/* The offsets gputrace's probes read (gputrace_common::cuda), checked by the C compiler. */
_Static_assert(sizeof(CUDA_MEMCPY2D) == 128, "CUDA_MEMCPY2D size");
_Static_assert(offsetof(CUDA_MEMCPY2D, srcMemoryType) == 16 && offsetof(CUDA_MEMCPY2D, srcHost) == 24 &&
               offsetof(CUDA_MEMCPY2D, srcDevice) == 32 && offsetof(CUDA_MEMCPY2D, dstMemoryType) == 72 &&
               offsetof(CUDA_MEMCPY2D, dstHost) == 80 && offsetof(CUDA_MEMCPY2D, dstDevice) == 88 &&
               offsetof(CUDA_MEMCPY2D, WidthInBytes) == 112 && offsetof(CUDA_MEMCPY2D, Height) == 120,
               "CUDA_MEMCPY2D layout");
_Static_assert(sizeof(CUDA_MEMCPY3D) == 200, "CUDA_MEMCPY3D size");
_Static_assert(offsetof(CUDA_MEMCPY3D, srcMemoryType) == 32 && offsetof(CUDA_MEMCPY3D, srcHost) == 40 &&
               offsetof(CUDA_MEMCPY3D, srcDevice) == 48 && offsetof(CUDA_MEMCPY3D, dstMemoryType) == 120 &&
               offsetof(CUDA_MEMCPY3D, dstHost) == 128 && offsetof(CUDA_MEMCPY3D, dstDevice) == 136 &&
               offsetof(CUDA_MEMCPY3D, WidthInBytes) == 176 && offsetof(CUDA_MEMCPY3D, Height) == 184 &&
               offsetof(CUDA_MEMCPY3D, Depth) == 192,
               "CUDA_MEMCPY3D layout");

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_READY 600

CUresult cuInit(unsigned flags);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream s, void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuGraphLaunch(CUgraphExec g, CUstream s);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p);
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p);
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s);
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p);
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s);
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize_v2(CUcontext ctx);
CUresult cuEventSynchronize(CUevent e);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuStreamQuery(CUstream s);
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags);
CUresult cuEventCreate(CUevent *e, unsigned flags);
CUresult cuEventDestroy_v2(CUevent e);
CUresult cuEventRecord(CUevent e, CUstream s);
CUresult cuEventQuery(CUevent e);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemFree_v2(CUdeviceptr p);
/* Virtual memory management; the allocation properties are not modelled. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop, unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr p, size_t size);
CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr p, size_t size);
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags);
CUresult cuMemAllocHost_v2(void **p, size_t n);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags);
CUresult cuMemHostUnregister(void *p);

/* Test hook, not part of CUDA: how much device memory the fake GPU has. */
void fake_cuda_set_memory_limit(uint64_t bytes);
#endif
