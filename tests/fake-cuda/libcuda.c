/* A fake CUDA driver (libcuda.so.1) with a simulated GPU timeline.
 *
 * The device is a set of streams, each a FIFO: a kernel or copy occupies its stream for its
 * duration, from the end of the item before it (or from its launch, where the stream is
 * empty), whether or not anyone waits for it. A launch or async copy appends work and returns,
 * except while its stream already holds FAKE_QUEUE_DEPTH pending items: then it blocks until
 * the oldest is done, as a real GPU's push buffer pushes back (the depth is measured on an
 * H100, docs/development.md "The fake GPU's queue"). The legacy default stream (0) waits for
 * every other stream's work and they for its, as CUDA's implicit synchronization has it.
 * Synchronize calls sleep until the work they wait for is done; events and cuStreamQuery read
 * the same timeline. A process that exits pays for the work it left queued first, as a real
 * context's teardown does. Copies from pageable host memory are staged by the host, which
 * blocks for the copy time, as the real driver does. Pinned memory is memory this library
 * allocated (MAP_SHARED|MAP_ANONYMOUS, which /proc/PID/maps shows as "/dev/zero (deleted)",
 * like the real driver's) or registered.
 *
 * With FAKE_GPU_LEDGER naming a file, the timeline and the memory in use are published there
 * (fake_gpu_ledger.h) for the fake NVML to read. FAKE_GPU_QUEUE_DEPTH overrides the depth
 * (tests of the model itself). */
#define _GNU_SOURCE
#include "fake_cuda.h"
#include "fake_gpu_ledger.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, visibility("default")))

static const uint64_t LAUNCH_HOST_NS = 2000;         /* host cost of one launch call */
static const uint64_t PCIE_BYTES_PER_US = 25000;      /* 25 GB/s for DMA from pinned memory */
static const uint64_t STAGING_BYTES_PER_US = 8000;    /* 8 GB/s host staging of pageable copies */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* How many items a stream holds pending before a launch blocks. Measured on an H100 (driver
 * 580.159.04, torch 2.11+cu130, validation/gpu/queue_depth.py, 2026-12-05): behind a running
 * kernel, 1021 launches returned at once and the 1022nd blocked until it ended, on the
 * default stream and on a created one alike: 1022 items pending, the running one included. */
#define FAKE_QUEUE_DEPTH 1022
static unsigned queue_depth = FAKE_QUEUE_DEPTH;

/* One FIFO per stream. `ring` holds the end times of its last `queue_depth` items, oldest at
 * `head`: ends never decrease along a FIFO, so the stream holds `queue_depth` pending items
 * exactly when the oldest of them has not ended yet. */
#define MAX_STREAMS 64
struct fake_stream {
    int in_use;
    uint64_t end_ns;   /* when its last queued item ends */
    uint64_t *ring;    /* allocated at its first item */
    unsigned head, count;
};
/* [0] is the legacy default stream; created streams take the others. */
static struct fake_stream streams[MAX_STREAMS] = {[0] = {.in_use = 1}};
/* When the last queued item of any stream ends (what a context-wide sync waits for). */
static uint64_t queue_end_ns;
/* The device as NVML's utilization sees it: busy while a kernel runs (NVML counts the time
 * "one or more kernels was executing"; a copy engine's transfer is no kernel). `kernel_end_ns`
 * is when the last queued kernel ends; `enqueued_ns` counts the union of the kernels' time (a
 * kernel that overlaps one queued already adds only what sticks out past it), so that busy
 * time up to t is `enqueued_ns - max(0, kernel_end_ns - t)`, as the ledger's reader takes it
 * (exact while no copy sits between kernels still to run). */
static uint64_t kernel_end_ns;
static uint64_t next_device_ptr = 0x500000000000ull; /* never mapped in the process */
static uint64_t memory_limit = 1ull << 40, memory_used;
static uint64_t enqueued_ns;             /* device ns ever queued, for the ledger */
/* The mapped ledger, or NULL (no FAKE_GPU_LEDGER, or a forked child). */
static struct fake_gpu_ledger *ledger;
static uint64_t ledger_pid;

struct range { uint64_t start, len; };
#define MAX_PINNED 256
static struct range pinned[MAX_PINNED];
#define MAX_ALLOCS 4096
static struct range allocs[MAX_ALLOCS];

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_until(uint64_t t) {
    while (now_ns() < t) {
    }
}

static void sleep_until(uint64_t t) {
    uint64_t n = now_ns();
    if (t > n + 200000) { /* sleep most of a long wait, spin the rest */
        struct timespec d = {(time_t)((t - n - 100000) / 1000000000ull), (long)((t - n - 100000) % 1000000000ull)};
        nanosleep(&d, NULL);
    }
    spin_until(t);
}

/* Write the timeline to the ledger, if there is one; called with `lock` held, which makes this
 * process's writes one at a time. A seqlock (no syscall, no lock shared with the reader): the
 * hot path stays a few stores, and a reader never blocks the fake GPU. */
static void publish(void) {
    struct fake_gpu_ledger *l = ledger;
    if (!l) return;
    uint64_t seq = LEDGER_LOAD(&l->seq);
    LEDGER_STORE(&l->seq, seq + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd count is seen before any new value */
    LEDGER_STORE(&l->enqueued_ns, enqueued_ns);
    LEDGER_STORE(&l->queue_end_ns, kernel_end_ns);
    LEDGER_STORE(&l->memory_used, memory_used);
    LEDGER_STORE(&l->pid, ledger_pid);
    __atomic_store_n(&l->seq, seq + 2, __ATOMIC_RELEASE);
}

/* A forked child has its own copy of the fake GPU (the queue is per process): its work would
 * overwrite the parent's timeline, so only the process that opened the ledger publishes. */
static void leave_ledger(void) { ledger = NULL; }

__attribute__((constructor)) static void open_ledger(void) {
    const char *path = getenv("FAKE_GPU_LEDGER");
    if (!path || !*path) return;
    /* Sized, not truncated: a reader may still map a previous job's ledger, and a file cut
     * short under its mapping would fault it (SIGBUS) on the next read. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    void *m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, sizeof *ledger) == 0)
        m = mmap(NULL, sizeof *ledger, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "fake libcuda: cannot map FAKE_GPU_LEDGER %s\n", path);
        return;
    }
    struct fake_gpu_ledger *l = m;
    /* No magic while the values are a previous job's: readers take them for nothing yet. */
    __atomic_store_n(&l->magic, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&lock);
    ledger = l;
    ledger_pid = (uint64_t)getpid();
    publish();
    pthread_mutex_unlock(&lock);
    __atomic_store_n(&l->magic, FAKE_GPU_LEDGER_MAGIC, __ATOMIC_RELEASE);
    pthread_atfork(NULL, NULL, leave_ledger);
}

/* The process is exiting: its context, and with it its memory, is gone (the real driver's
 * process list drops it then). A process killed by a signal skips this; the reader also
 * checks that the pid is alive. */
static void close_ledger(void) {
    if (!ledger) return;
    pthread_mutex_lock(&lock);
    ledger_pid = 0;
    publish();
    pthread_mutex_unlock(&lock);
}

/* A kernel that finds its stream idle costs the device this much more than one queued behind
 * another, as on a real GPU (the H200: 1.15 us, docs/validation.md "graph_floor"): a graph's
 * replay runs its kernels back to back. */
#define ISOLATED_LAUNCH_NS 1150

/* Created streams' handles: a tag and an index, never an address the job could hold. */
#define STREAM_HANDLE_BASE 0x57e00u

/* The stream a handle names: 0 (and CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, which the fake
 * treats as the default stream) or a created one; an unknown handle is the default stream. */
static unsigned stream_index(CUstream s) {
    uintptr_t h = (uintptr_t)s;
    if (h > STREAM_HANDLE_BASE && h < STREAM_HANDLE_BASE + MAX_STREAMS && streams[h - STREAM_HANDLE_BASE].in_use)
        return (unsigned)(h - STREAM_HANDLE_BASE);
    return 0;
}

/* When the work that stream `i` waits for ends: its own, and for the legacy default stream
 * every stream's. Called with `lock` held. */
static uint64_t stream_end_locked(unsigned i) {
    if (i != 0) return streams[i].end_ns > streams[0].end_ns ? streams[i].end_ns : streams[0].end_ns;
    return queue_end_ns;
}

/* The fake NCCL's collective in flight, if any (libnccl.c): the device reached it when it was
 * queued, and it ends only once every rank of its communicator has reached it too, which
 * `pending_fn` waits for and returns. Settled before any later work is queued or waited for:
 * the host then blocks at its next sync, as with real NCCL, whose kernel spins on the device
 * until its peers arrive. */
typedef uint64_t (*fake_pending_fn)(void *arg);
static fake_pending_fn pending_fn;
static void *pending_arg;

/* Mark [start, end) of stream `i` busy on the device (running a kernel where `kernel`);
 * called with `lock` held. */
static void occupy_locked(unsigned i, uint64_t start, uint64_t end, int kernel) {
    if (streams[i].end_ns < end) streams[i].end_ns = end;
    if (end > queue_end_ns) queue_end_ns = end;
    if (kernel && end > kernel_end_ns) {
        enqueued_ns += end - (start > kernel_end_ns ? start : kernel_end_ns);
        kernel_end_ns = end;
    }
}

static void settle(void) {
    pthread_mutex_lock(&lock);
    fake_pending_fn fn = pending_fn;
    void *arg = pending_arg;
    pending_fn = NULL;
    pthread_mutex_unlock(&lock);
    if (!fn) return;
    uint64_t end = fn(arg);
    pthread_mutex_lock(&lock);
    /* The device spins in the collective (on the default stream) until then: busy, as NVML
     * would say. */
    if (queue_end_ns < end) occupy_locked(0, queue_end_ns, end, 1);
    publish();
    pthread_mutex_unlock(&lock);
}

/* For the fake NCCL: queue a collective settled by `fn(arg)`; returns when the device reaches
 * it (the end of the work queued before). One is in flight at a time: a second settles the
 * first. */
NOINLINE uint64_t fake_cuda_enqueue_collective(fake_pending_fn fn, void *arg) {
    settle();
    pthread_mutex_lock(&lock);
    uint64_t n = now_ns();
    uint64_t ready = queue_end_ns > n ? queue_end_ns : n;
    pending_fn = fn;
    pending_arg = arg;
    pthread_mutex_unlock(&lock);
    return ready;
}

/* Append `ns` of device work (a kernel's where `kernel`) to stream `i`, first waiting while
 * the stream is full; returns when the work will be done. */
static uint64_t enqueue_on(unsigned i, uint64_t ns, int kernel) {
    settle();
    pthread_mutex_lock(&lock);
    struct fake_stream *s = &streams[i];
    if (!s->ring) s->ring = calloc(queue_depth, sizeof *s->ring);
    uint64_t n = now_ns();
    /* Full: the push buffer has no room until the oldest pending item ends. Other threads may
     * queue meanwhile; look again after each wait. */
    while (s->ring && s->count == queue_depth && s->ring[s->head] > n) {
        uint64_t t = s->ring[s->head];
        pthread_mutex_unlock(&lock);
        sleep_until(t);
        pthread_mutex_lock(&lock);
        n = now_ns();
    }
    uint64_t start = stream_end_locked(i);
    if (start <= n) {
        start = n;
        if (kernel) ns += ISOLATED_LAUNCH_NS;
    }
    uint64_t end = start + ns;
    occupy_locked(i, start, end, kernel);
    if (s->ring) {
        if (s->count == queue_depth) { /* the oldest has ended: its slot is free */
            s->head = (s->head + 1) % queue_depth;
            s->count--;
        }
        s->ring[(s->head + s->count) % queue_depth] = end;
        s->count++;
    }
    publish();
    pthread_mutex_unlock(&lock);
    return end;
}

static uint64_t enqueue(uint64_t ns) { return enqueue_on(0, ns, 0); }
static uint64_t enqueue_stream(CUstream s, uint64_t ns) { return enqueue_on(stream_index(s), ns, 0); }

/* When the work that stream `s` waits for ends (every stream's for the default one). */
static uint64_t stream_end(CUstream s) {
    settle();
    pthread_mutex_lock(&lock);
    uint64_t end = stream_end_locked(stream_index(s));
    pthread_mutex_unlock(&lock);
    return end;
}

static uint64_t queue_end(void) {
    settle();
    pthread_mutex_lock(&lock);
    uint64_t end = queue_end_ns;
    pthread_mutex_unlock(&lock);
    return end;
}

/* The queue depth, from FAKE_GPU_QUEUE_DEPTH where set (1..1<<20), before any work. */
__attribute__((constructor)) static void read_queue_depth(void) {
    const char *v = getenv("FAKE_GPU_QUEUE_DEPTH");
    if (!v || !*v) return;
    char *end;
    long d = strtol(v, &end, 10);
    if (*end == 0 && d >= 1 && d <= (1l << 20)) queue_depth = (unsigned)d;
    else fprintf(stderr, "fake libcuda: FAKE_GPU_QUEUE_DEPTH=%s is not a depth (1..1048576); keeping %u\n", v, queue_depth);
}

static int is_pinned(const void *p) {
    uint64_t a = (uint64_t)p;
    pthread_mutex_lock(&lock);
    int found = 0;
    for (int i = 0; i < MAX_PINNED && !found; i++)
        found = pinned[i].len && a >= pinned[i].start && a < pinned[i].start + pinned[i].len;
    pthread_mutex_unlock(&lock);
    return found;
}

static void remember(struct range *table, int cap, uint64_t start, uint64_t len) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < cap; i++)
        if (!table[i].len) { table[i].start = start; table[i].len = len; break; }
    pthread_mutex_unlock(&lock);
}

static uint64_t forget(struct range *table, int cap, uint64_t start) {
    uint64_t len = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < cap; i++)
        if (table[i].len && table[i].start == start) { len = table[i].len; table[i].len = 0; break; }
    pthread_mutex_unlock(&lock);
    return len;
}

static uint64_t transfer_ns(size_t n, uint64_t bytes_per_us) { return (uint64_t)n * 1000ull / bytes_per_us + 1000; }

void fake_cuda_set_memory_limit(uint64_t bytes) { memory_limit = bytes; }

/* The process is exiting: the context's teardown waits for the work still queued (measured on
 * an H100: a process that queued 0.76 s of work and returned from main at once took as long to
 * be gone as one that synchronized first, validation/gpu/queue_depth.py), then its memory is
 * released. A process that dies by a signal, or leaves by _exit (a forked worker), skips this. */
__attribute__((destructor)) static void tear_down_context(void) {
    sleep_until(queue_end());
    close_ledger();
}

NOINLINE CUresult cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }
NOINLINE CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) { *ctx = (CUcontext)(uintptr_t)(0x1000 + dev); return CUDA_SUCCESS; }
NOINLINE CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { (void)dev; return CUDA_SUCCESS; }
NOINLINE CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev) { (void)flags; *ctx = (CUcontext)(uintptr_t)(0x2000 + dev); return CUDA_SUCCESS; }
NOINLINE CUresult cuCtxDestroy_v2(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }

static CUresult launch(CUfunction f, CUstream s) {
    uint64_t start = now_ns();
    enqueue_on(stream_index(s), f ? f->duration_ns : 1000, 1);
    spin_until(start + LAUNCH_HOST_NS);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shmem, CUstream s, void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shmem; (void)params; (void)extra;
    return launch(f, s);
}

NOINLINE CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
    (void)params; (void)extra;
    return launch(f, config ? config->hStream : NULL);
}

/* In the fake, a graph exec handle is a kernel descriptor for the whole graph. */
NOINLINE CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { return launch((CUfunction)(void *)g, s); }

/* A copy on stream `s` (a synchronous one is on the default stream: `s` is 0 there). */
static CUresult copy_h2d(const void *src, size_t n, int async, CUstream s) {
    if (async && is_pinned(src)) { enqueue_stream(s, transfer_ns(n, PCIE_BYTES_PER_US)); return CUDA_SUCCESS; }
    /* Pageable (or synchronous): the host stages the data and waits for the transfer. */
    sleep_until(stream_end(s));
    sleep_until(enqueue_stream(s, transfer_ns(n, is_pinned(src) ? PCIE_BYTES_PER_US : STAGING_BYTES_PER_US)));
    return CUDA_SUCCESS;
}

static CUresult copy_d2h(void *dst, size_t n, int async, CUstream s) {
    if (async && is_pinned(dst)) { enqueue_stream(s, transfer_ns(n, PCIE_BYTES_PER_US)); return CUDA_SUCCESS; }
    sleep_until(enqueue_stream(s, transfer_ns(n, is_pinned(dst) ? PCIE_BYTES_PER_US : STAGING_BYTES_PER_US)));
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { (void)dst; return copy_h2d(src, n, 0, NULL); }
NOINLINE CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { (void)src; return copy_d2h(dst, n, 0, NULL); }
NOINLINE CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { (void)dst; (void)src; sleep_until(enqueue(transfer_ns(n, 1000000))); return CUDA_SUCCESS; }
NOINLINE CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { (void)dst; return copy_h2d(src, n, 1, s); }
NOINLINE CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { (void)src; return copy_d2h(dst, n, 1, s); }
NOINLINE CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { (void)dst; (void)src; enqueue_stream(s, transfer_ns(n, 1000000)); return CUDA_SUCCESS; }

static int is_device(CUdeviceptr p) { return p >= 0x500000000000ull && p < next_device_ptr; }

NOINLINE CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (is_device(dst) && !is_device(src)) return copy_h2d((const void *)src, n, 0, NULL);
    if (!is_device(dst) && is_device(src)) return copy_d2h((void *)dst, n, 0, NULL);
    return cuMemcpyDtoD_v2(dst, src, n);
}

NOINLINE CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    if (is_device(dst) && !is_device(src)) return copy_h2d((const void *)src, n, 1, s);
    if (!is_device(dst) && is_device(src)) return copy_d2h((void *)dst, n, 1, s);
    enqueue_stream(s, transfer_ns(n, 1000000));
    return CUDA_SUCCESS;
}

/* 2D/3D copies: the memory types say where each end is, as in the real driver; a unified
 * end is device memory if it lies in the fake's device address range. */
static int end_is_device(CUmemorytype type, CUdeviceptr dev) {
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_ARRAY || (type == CU_MEMORYTYPE_UNIFIED && is_device(dev));
}

static CUresult struct_copy(CUmemorytype st, const void *sh, CUdeviceptr sd, CUmemorytype dt, void *dh, CUdeviceptr dd,
                            size_t n, int async, CUstream s) {
    if (st < CU_MEMORYTYPE_HOST || st > CU_MEMORYTYPE_UNIFIED || dt < CU_MEMORYTYPE_HOST || dt > CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    int src_dev = end_is_device(st, sd), dst_dev = end_is_device(dt, dd);
    const void *src_host = st == CU_MEMORYTYPE_HOST ? sh : (const void *)(uintptr_t)sd;
    void *dst_host = dt == CU_MEMORYTYPE_HOST ? dh : (void *)(uintptr_t)dd;
    if (!src_dev && dst_dev) return copy_h2d(src_host, n, async, s);
    if (src_dev && !dst_dev) return copy_d2h(dst_host, n, async, s);
    if (src_dev && dst_dev) {
        uint64_t end = enqueue_stream(s, transfer_ns(n, 1000000));
        if (!async) sleep_until(end);
        return CUDA_SUCCESS;
    }
    spin_until(now_ns() + transfer_ns(n, STAGING_BYTES_PER_US)); /* host to host: the CPU copies */
    return CUDA_SUCCESS;
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, int async, CUstream s) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    return struct_copy(p->srcMemoryType, p->srcHost, p->srcDevice, p->dstMemoryType, p->dstHost, p->dstDevice,
                       p->WidthInBytes * p->Height, async, s);
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, int async, CUstream s) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    return struct_copy(p->srcMemoryType, p->srcHost, p->srcDevice, p->dstMemoryType, p->dstHost, p->dstDevice,
                       p->WidthInBytes * p->Height * p->Depth, async, s);
}

NOINLINE CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, 0, NULL); }
NOINLINE CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, 0, NULL); }
NOINLINE CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, 1, s); }
NOINLINE CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d(p, 0, NULL); }
NOINLINE CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, 1, s); }

NOINLINE CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) { (void)dst; (void)v; sleep_until(enqueue(transfer_ns(n, 1000000))); return CUDA_SUCCESS; }

NOINLINE CUresult cuStreamSynchronize(CUstream s) { sleep_until(stream_end(s)); return CUDA_SUCCESS; }
NOINLINE CUresult cuCtxSynchronize(void) { sleep_until(queue_end()); return CUDA_SUCCESS; }
NOINLINE CUresult cuCtxSynchronize_v2(CUcontext ctx) { (void)ctx; sleep_until(queue_end()); return CUDA_SUCCESS; }

/* Streams and events. A created stream is a FIFO of its own; the handle is a tag and an
 * index (stream_index). An event is the time its stream's work ended when it was recorded;
 * never recorded, it is complete, as CUDA's is. */
struct CUevent_st { uint64_t at_ns; };

NOINLINE CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    (void)flags;
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    unsigned i = 1;
    while (i < MAX_STREAMS && streams[i].in_use) i++;
    if (i == MAX_STREAMS) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
    streams[i].in_use = 1;
    streams[i].end_ns = 0;
    streams[i].head = streams[i].count = 0;
    pthread_mutex_unlock(&lock);
    *s = (CUstream)(uintptr_t)(STREAM_HANDLE_BASE + i);
    return CUDA_SUCCESS;
}

/* Its work still runs to its end (the device keeps the time); the handle is free again. */
NOINLINE CUresult cuStreamDestroy_v2(CUstream s) {
    unsigned i = stream_index(s);
    if (i == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    streams[i].in_use = 0;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuStreamQuery(CUstream s) { return stream_end(s) > now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; }

NOINLINE CUresult cuEventCreate(CUevent *e, unsigned flags) {
    (void)flags;
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    *e = calloc(1, sizeof **e);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

NOINLINE CUresult cuEventDestroy_v2(CUevent e) { free(e); return CUDA_SUCCESS; }

NOINLINE CUresult cuEventRecord(CUevent e, CUstream s) {
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    uint64_t end = stream_end(s), n = now_ns();
    e->at_ns = end > n ? end : n;
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuEventQuery(CUevent e) { return e && e->at_ns > now_ns() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS; }
NOINLINE CUresult cuEventSynchronize(CUevent e) { if (e) sleep_until(e->at_ns); return CUDA_SUCCESS; }

/* Work queued on `s` after this starts no earlier than the event. */
NOINLINE CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    (void)flags;
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    unsigned i = stream_index(s);
    pthread_mutex_lock(&lock);
    if (streams[i].end_ns < e->at_ns) streams[i].end_ns = e->at_ns;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    /* A real cudaMalloc costs tens of microseconds of host time. */
    spin_until(now_ns() + 20000);
    pthread_mutex_lock(&lock);
    if (memory_used + n > memory_limit) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
    memory_used += n;
    publish();
    *p = next_device_ptr;
    next_device_ptr += (n + 0xfff) & ~0xfffull;
    pthread_mutex_unlock(&lock);
    remember(allocs, MAX_ALLOCS, *p, n);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemFree_v2(CUdeviceptr p) {
    uint64_t n = forget(allocs, MAX_ALLOCS, p);
    pthread_mutex_lock(&lock);
    memory_used -= n;
    publish();
    pthread_mutex_unlock(&lock);
    spin_until(now_ns() + 10000);
    return CUDA_SUCCESS;
}

/* Virtual memory management, as PyTorch's expandable segments use it: physical memory from
 * cuMemCreate, mapped into a reserved range. Handles are small integers, never addresses. */
static uint64_t next_handle = 1;

NOINLINE CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const void *prop, unsigned long long flags) {
    (void)prop; (void)flags;
    spin_until(now_ns() + 20000);
    pthread_mutex_lock(&lock);
    if (memory_used + size > memory_limit) { pthread_mutex_unlock(&lock); return CUDA_ERROR_OUT_OF_MEMORY; }
    memory_used += size;
    publish();
    *h = next_handle++;
    pthread_mutex_unlock(&lock);
    remember(allocs, MAX_ALLOCS, *h, size);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    uint64_t n = forget(allocs, MAX_ALLOCS, h);
    pthread_mutex_lock(&lock);
    memory_used -= n;
    publish();
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)alignment; (void)addr; (void)flags;
    pthread_mutex_lock(&lock);
    *p = next_device_ptr;
    next_device_ptr += (size + 0xfff) & ~0xfffull;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemAddressFree(CUdeviceptr p, size_t size) { (void)p; (void)size; return CUDA_SUCCESS; }

NOINLINE CUresult cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags) {
    (void)offset; (void)flags;
    if (!is_device(p) || !h) return CUDA_ERROR_INVALID_VALUE;
    spin_until(now_ns() + 5000 + size / 1000); /* page-table updates scale with the size */
    return CUDA_SUCCESS;
}

#ifdef FAKE_UNPROBEABLE_UNMAP
/* The variant library of the partial-attach test (`unprobeable/`): cuMemUnmap begins with
   an int3, an instruction the kernel refuses to probe, so attaching to it fails while every
   other symbol attaches. Nothing calls it there. */
__asm__(".text\n.globl cuMemUnmap\n.type cuMemUnmap, @function\ncuMemUnmap:\n\tint3\n\tret\n.size cuMemUnmap, .-cuMemUnmap\n");
#else
NOINLINE CUresult cuMemUnmap(CUdeviceptr p, size_t size) {
    if (!is_device(p)) return CUDA_ERROR_INVALID_VALUE;
    spin_until(now_ns() + 5000 + size / 1000);
    return CUDA_SUCCESS;
}
#endif

NOINLINE CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    (void)flags;
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    remember(pinned, MAX_PINNED, (uint64_t)m, n);
    *p = m;
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemAllocHost_v2(void **p, size_t n) { return cuMemHostAlloc(p, n, 0); }

NOINLINE CUresult cuMemFreeHost(void *p) {
    uint64_t n = forget(pinned, MAX_PINNED, (uint64_t)p);
    if (n) munmap(p, n);
    return CUDA_SUCCESS;
}

NOINLINE CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { (void)flags; remember(pinned, MAX_PINNED, (uint64_t)p, n); return CUDA_SUCCESS; }
NOINLINE CUresult cuMemHostUnregister(void *p) { forget(pinned, MAX_PINNED, (uint64_t)p); return CUDA_SUCCESS; }
