/* Workloads for the fake CUDA with known call counts and planted bottlenecks.
 *
 * The CUDA libraries are dlopen'ed (before the gate by default, after it with
 * --load-after-gate), so one binary covers "CUDA already loaded when we attach" and
 * "CUDA loaded after we attach". Every step of every thread does the same calls, so the
 * expected counts are the per-step counts times steps times threads (times 2 with --fork).
 *
 *   --gate                 print "ready PID" and wait for a line on stdin before working
 *   --threads T --steps S  T worker threads, S steps each
 *   --runtime-launches N   cudaLaunchKernel per step        --driver-launches N  cuLaunchKernel
 *   --ex-launches N        cuLaunchKernelEx per step        --graphs N           cudaGraphLaunch
 *   --kernel-us U          device time of each kernel (graphs: 10 × U)
 *   --pageable-h2d B       per step: B bytes cudaMemcpyAsync H2D from malloc'ed memory, then
 *                          cudaStreamSynchronize (what non_blocking=False does)
 *   --pinned-h2d B         per step: B bytes async H2D from cudaHostAlloc'ed memory
 *   --pin-after-gate       allocate that pinned buffer after the gate (default: before)
 *   --item N               per step: N × (4-byte D2H async + cudaStreamSynchronize) (.item())
 *   --item-sync N          per step: N × a synchronous 4-byte D2H cudaMemcpy (a native scalar read)
 *   --blocking-d2h B       per step, after the launches: B bytes async D2H into cudaHostAlloc'ed
 *                          (pinned) memory, then cudaStreamSynchronize: the host waits for the
 *                          kernels queued before and for the transfer (B ≤ 64 MiB)
 *   --copy2d B             per step: one cudaMemcpy2DAsync H2D of B bytes (16 rows of B/16,
 *                          B a multiple of 16) from malloc'ed memory with a wider pitch
 *   --copy3d B             per step, after the launches: one cudaMemcpy3D D2H of B bytes
 *                          (4 × 4 rows of B/16, B a multiple of 16) into malloc'ed memory
 *   --bad-copy2d N         per step: N × cuMemcpy2D_v2(NULL), a copy whose parameters cannot be
 *                          read (the driver refuses it; the probe's read fails: tests/tests/loss.rs)
 *   --vmm N                per step: N × (cuMemCreate 2 MiB + cuMemMap) into a range reserved
 *                          once per thread, then N × (cuMemUnmap + cuMemRelease), as PyTorch's
 *                          expandable segments grow and shrink (N ≤ 64)
 *   --sync                 per step: cudaDeviceSynchronize at the end
 *   --checkpoint-every N   every N steps, save_checkpoint(): 8 × 4 MiB D2H copies into malloc'ed
 *                          memory, each written to /dev/null and followed by 5 ms of host work
 *   --alloc-churn N        per step: N × (cudaMalloc 1 MiB + cudaFree)
 *   --leak B               per step: keep_activations() cudaMallocs B bytes and never frees them
 *   --cache-pct P          per step: cached_malloc() asks for a block of P, P+5, P+10 or P+15 %
 *                          of --device-memory-mib (by step) and keeps it cached; when the driver
 *                          is out of memory it frees every cached block and retries once (a
 *                          caching allocator's out-of-memory path)
 *   --idle-children N      after loading CUDA (before the gate), fork N children that make no CUDA
 *                          call and sleep until the job exits (DataLoader workers forked from a
 *                          CUDA process: they inherit its driver mappings, not its context)
 *   --oom-at-end B         after the steps, cached_malloc() B bytes; if the retry fails too, print
 *                          "out of memory" and exit with status 3 (an OutOfMemoryError)
 *   --host-us U            per step: U µs of host work (spinning)
 *   --torch-prep-us U      per step, before its launches: U µs of host work inside the fake
 *                          framework's CPU library (libtorch_cpu.so beside libcuda): a batch made
 *                          through torch on the training thread, no loader involved
 *   --fork                 fork once after the gate; parent and child both run the workload
 *   --sleep-ms M           per step: sleep M ms (a thread that waits, not computes)
 *   --sleep-once-ms M      once, on the launching thread before its first step: sleep M ms (a
 *                          one-off pause, not the loop's)
 *   --read-file PATH       after the gate, a forked worker process reads PATH with O_DIRECT
 *   --read-bytes N         ... N bytes of it, in 1 MiB requests (default: 64 MiB)
 *   --pipe-worker-us U     after the gate, a forked worker process computes U µs per item and
 *                          writes it to a pipe; each step first reads one item from the pipe
 *                          (a training loop fed by a DataLoader worker)
 *   --pipe-worker-read B   ... and before each item reads B bytes of --read-file with O_DIRECT (a
 *                          loader worker whose pace is the disk's)
 *   --read-per-step B      per step, the launching thread itself reads B bytes of --read-file
 *                          with O_DIRECT (a training loop blocked on the disk)
 *   --startup-read B       once, before its first step, the launching thread warms up (2000
 *                          launches and a sync), then reads B bytes of --read-file with
 *                          O_DIRECT, from its start again where it ends (a start-up reading
 *                          what it loads)
 *   --device-memory-mib M  give the fake GPU M MiB of memory (allocations beyond fail with
 *                          CUDA_ERROR_OUT_OF_MEMORY)
 *   --print-time           print "work_ns N": wall time of the workers' loops and of the GPU work
 *                          they queued (a device sync ends it), without the process's start
 *                          and exit (benchmarks, twins)
 *   --settle-ms M          sleep M ms after loading CUDA, before working
 *   --hold-ms M            after the workload, print "holding PID" and sleep M ms still
 *                          holding its device memory (an idle GPU holder, for sweep)
 *   --lib-dir DIR          where libcuda.so.1 and libcudart.so.13 are (default: beside the binary)
 *   --ranks N              a data-parallel job, as torchrun starts one: after the gate, start N rank
 *                          processes (this program again, with RANK, LOCAL_RANK and WORLD_SIZE in
 *                          its environment) and wait for them; the launcher itself makes no CUDA
 *                          call. Each rank joins one communicator of the fake NCCL (libnccl.so.2)
 *                          and runs the workload (after --settle-ms: time for a tracer to find
 *                          the libraries it loaded, as a real job's imports give it)
 *   --allreduce-bytes B    per step, after the launches: one ncclAllReduce of B bytes (float32,
 *                          sum) on the default stream, then cudaStreamSynchronize
 *   --straggler-host-us U  the last rank's --host-us per step instead (a straggler)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } dim3;
struct fake_kernel { uint64_t duration_ns; };
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shmem;
    void *stream, *attrs;
    unsigned nattrs;
} launch_config;
/* cudaMemcpy3DParms (driver_types.h). */
typedef struct {
    void *src_array;
    size_t src_pos[3];
    struct { void *ptr; size_t pitch, xsize, ysize; } src_ptr;
    void *dst_array;
    size_t dst_pos[3];
    struct { void *ptr; size_t pitch, xsize, ysize; } dst_ptr;
    size_t extent[3];
    int kind;
} memcpy3d_parms;

enum { H2D = 1, D2H = 2 };
#define COPY_ROWS 16
#define VMM_CHUNK ((size_t)2 << 20)
#define VMM_MAX 64

static int (*rt_launch)(const void *, dim3, dim3, void **, size_t, void *);
static int (*rt_graph)(void *, void *);
static int (*rt_memcpy_async)(void *, const void *, size_t, int, void *);
static int (*rt_memcpy)(void *, const void *, size_t, int);
static int (*rt_stream_sync)(void *);
static int (*rt_device_sync)(void);
static int (*rt_malloc)(void **, size_t);
static int (*rt_free)(void *);
static int (*rt_host_alloc)(void **, size_t, unsigned);
static int (*rt_memcpy2d_async)(void *, size_t, const void *, size_t, size_t, size_t, int, void *);
static int (*rt_memcpy3d)(const memcpy3d_parms *);
static int (*drv_mem_create)(uint64_t *, size_t, const void *, unsigned long long);
static int (*drv_mem_release)(uint64_t);
static int (*drv_mem_address_reserve)(uint64_t *, size_t, size_t, uint64_t, unsigned long long);
static int (*drv_mem_address_free)(uint64_t, size_t);
static int (*drv_mem_map)(uint64_t, size_t, size_t, uint64_t, unsigned long long);
static int (*drv_mem_unmap)(uint64_t, size_t);
static int (*drv_memcpy_2d)(const void *);
static int (*drv_launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
static int (*drv_launch_ex)(const launch_config *, void *, void **, void **);

/* The fake NCCL's entry points (nccl.h's signatures, handles reduced to pointers). */
typedef struct { char internal[128]; } nccl_unique_id;
static int (*nccl_get_unique_id)(nccl_unique_id *);
static int (*nccl_comm_init_rank)(void **, int, nccl_unique_id, int);
static int (*nccl_all_reduce)(const void *, void *, size_t, int, int, void *, void *);
static int (*nccl_comm_destroy)(void *);
/* This rank's communicator (--ranks), and its rank. */
static void *nccl_comm;
static int nccl_rank;

static struct {
    int ranks;
    long allreduce_bytes, straggler_host_us;
    int gate, threads, steps, runtime_launches, driver_launches, ex_launches, graphs, item, item_sync, sync, alloc_churn, fork, vmm, bad_copy2d;
    int load_after_gate, pin_after_gate, print_time, pipe_worker_us, checkpoint_every, cache_pct, idle_children;
    long pipe_worker_read;
    size_t leak, oom_at_end;
    long kernel_us, host_us, torch_prep_us, settle_ms, sleep_ms, sleep_once_ms, device_memory_mib, hold_ms;
    long read_bytes, read_per_step, startup_read;
    char read_file[PATH_MAX];
    size_t pageable_h2d, pinned_h2d, copy2d, copy3d, blocking_d2h;
    char lib_dir[PATH_MAX];
} opt = {.threads = 1, .steps = 1, .kernel_us = 5, .read_bytes = 64l << 20};

static struct fake_kernel kernel, graph;
static void *pinned_buf;
static void *pinned_d2h_buf;
static void *device_buf;
/* The read end of the --pipe-worker-us feeder's pipe. */
static int feeder_rd = -1;

#define NOINLINE_JOB __attribute__((noinline, used))

static void die(const char *what) {
    fprintf(stderr, "fakejob: %s\n", what);
    exit(2);
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) die(dlerror());
    return p;
}

/* The fake framework's CPU op (--torch-prep-us), from libtorch_cpu.so. */
static void (*torch_cpu_op)(long);

static void load_cuda(void) {
    char path[PATH_MAX + 32];
    if (opt.torch_prep_us) {
        snprintf(path, sizeof path, "%s/libtorch_cpu.so", opt.lib_dir);
        void *torch = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!torch) die(dlerror());
        torch_cpu_op = sym(torch, "at_native_cpu_stack_kernel");
    }
    snprintf(path, sizeof path, "%s/libcuda.so.1", opt.lib_dir);
    void *drv = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!drv) die(dlerror());
    snprintf(path, sizeof path, "%s/libcudart.so.13", opt.lib_dir);
    void *rt = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!rt) die(dlerror());
    rt_launch = sym(rt, "cudaLaunchKernel");
    rt_graph = sym(rt, "cudaGraphLaunch");
    rt_memcpy_async = sym(rt, "cudaMemcpyAsync");
    rt_memcpy = sym(rt, "cudaMemcpy");
    rt_stream_sync = sym(rt, "cudaStreamSynchronize");
    rt_device_sync = sym(rt, "cudaDeviceSynchronize");
    rt_malloc = sym(rt, "cudaMalloc");
    rt_free = sym(rt, "cudaFree");
    rt_host_alloc = sym(rt, "cudaHostAlloc");
    rt_memcpy2d_async = sym(rt, "cudaMemcpy2DAsync");
    rt_memcpy3d = sym(rt, "cudaMemcpy3D");
    drv_mem_create = sym(drv, "cuMemCreate");
    drv_mem_release = sym(drv, "cuMemRelease");
    drv_mem_address_reserve = sym(drv, "cuMemAddressReserve");
    drv_mem_address_free = sym(drv, "cuMemAddressFree");
    drv_mem_map = sym(drv, "cuMemMap");
    drv_mem_unmap = sym(drv, "cuMemUnmap");
    drv_launch = sym(drv, "cuLaunchKernel");
    drv_memcpy_2d = sym(drv, "cuMemcpy2D_v2");
    drv_launch_ex = sym(drv, "cuLaunchKernelEx");
    if (opt.ranks) {
        snprintf(path, sizeof path, "%s/libnccl.so.2", opt.lib_dir);
        void *nccl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!nccl) die(dlerror());
        nccl_get_unique_id = sym(nccl, "ncclGetUniqueId");
        nccl_comm_init_rank = sym(nccl, "ncclCommInitRank");
        nccl_all_reduce = sym(nccl, "ncclAllReduce");
        nccl_comm_destroy = sym(nccl, "ncclCommDestroy");
    }
    if (opt.device_memory_mib) {
        void (*set_limit)(uint64_t) = sym(drv, "fake_cuda_set_memory_limit");
        set_limit((uint64_t)opt.device_memory_mib << 20);
    }
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin_buffer(void) {
    if (opt.pinned_h2d && rt_host_alloc(&pinned_buf, opt.pinned_h2d, 0)) die("cudaHostAlloc failed");
    if (opt.blocking_d2h && rt_host_alloc(&pinned_d2h_buf, opt.blocking_d2h, 0)) die("cudaHostAlloc failed");
}

/* One 2D H2D copy of `opt.copy2d` bytes: COPY_ROWS rows read from a host buffer whose
 * pitch is wider than a row, written packed into device memory. */
static void copy_2d(const char *host) {
    size_t width = opt.copy2d / COPY_ROWS;
    if (rt_memcpy2d_async(device_buf, width, host, width + 64, width, COPY_ROWS, H2D, 0)) die("cudaMemcpy2DAsync failed");
}

/* One synchronous 3D D2H copy of `opt.copy3d` bytes: 4 slices of 4 rows. */
static void copy_3d(char *host) {
    size_t width = opt.copy3d / COPY_ROWS;
    memcpy3d_parms p = {0};
    p.src_ptr.ptr = device_buf;
    p.src_ptr.pitch = p.src_ptr.xsize = width;
    p.src_ptr.ysize = 4;
    p.dst_ptr.ptr = host;
    p.dst_ptr.pitch = p.dst_ptr.xsize = width;
    p.dst_ptr.ysize = 4;
    p.extent[0] = width;
    p.extent[1] = 4;
    p.extent[2] = 4;
    p.kind = D2H;
    if (rt_memcpy3d(&p)) die("cudaMemcpy3D failed");
}

/* Grow a segment by `opt.vmm` chunks, then shrink it back, through the driver's virtual
 * memory API (PyTorch calls it directly, not through the runtime). */
static void vmm_cycle(uint64_t base) {
    uint64_t handles[VMM_MAX];
    for (int i = 0; i < opt.vmm; i++) {
        if (drv_mem_create(&handles[i], VMM_CHUNK, 0, 0)) die("cuMemCreate failed");
        if (drv_mem_map(base + (uint64_t)i * VMM_CHUNK, VMM_CHUNK, 0, handles[i], 0)) die("cuMemMap failed");
    }
    for (int i = 0; i < opt.vmm; i++) {
        if (drv_mem_unmap(base + (uint64_t)i * VMM_CHUNK, VMM_CHUNK)) die("cuMemUnmap failed");
        if (drv_mem_release(handles[i])) die("cuMemRelease failed");
    }
}

/* Host work between launches (--host-us): a named function for the sites to find. */
NOINLINE_JOB void compute_on_host(long us) {
    uint64_t until = now_ns() + (uint64_t)us * 1000;
    volatile unsigned long sink = 0;
    /* Mostly arithmetic, as real host work is: a loop of clock reads would put most samples
       in the vDSO, whose code keeps no frame pointer to find this function by. */
    while (now_ns() < until) {
        for (int i = 0; i < 4096; i++) sink += (unsigned long)i;
    }
}

/* A batch made through the framework's CPU ops (--torch-prep-us): a function of the job's own
 * around them, as a script's get_batch() is. */
NOINLINE_JOB void make_batch_through_the_framework(void) {
    torch_cpu_op(opt.torch_prep_us);
}

/* One .item(): a 4-byte D2H copy and a stream sync (--item), from a named function. */
NOINLINE_JOB void read_scalar(int *scalar) {
    rt_memcpy_async(scalar, device_buf, sizeof *scalar, 2, 0);
    rt_stream_sync(0);
}

/* A native scalar read (--item-sync): one synchronous 4-byte D2H cudaMemcpy, which waits for
 * the queue as .item()'s copy and sync do. */
NOINLINE_JOB void read_scalar_sync(int *scalar) {
    /* Its result used after the call: no tail call, so this function keeps its frame. */
    if (rt_memcpy(scalar, device_buf, sizeof *scalar, 2)) die("cudaMemcpy failed");
}

/* Activations kept alive across steps (--leak): a loss list that keeps every step's graph. */
NOINLINE_JOB void keep_activations(size_t bytes) {
    void *p;
    if (rt_malloc(&p, bytes)) die("cudaMalloc failed (--leak ran out of device memory)");
}

/* A caching allocator (--cache-pct, --oom-at-end): blocks stay cached; when the driver says
 * out of memory, every cached block is freed and the request retried once. */
#define CACHE_MAX 256
struct cache { void *blocks[CACHE_MAX]; int n; };

static void release_cache(struct cache *c) {
    for (int i = 0; i < c->n; i++) rt_free(c->blocks[i]);
    c->n = 0;
}

NOINLINE_JOB int cached_malloc(struct cache *c, size_t bytes) {
    void *p;
    if (rt_malloc(&p, bytes)) {
        release_cache(c);
        if (rt_malloc(&p, bytes)) return -1;
    }
    if (c->n == CACHE_MAX) release_cache(c);
    c->blocks[c->n++] = p;
    return 0;
}

static int out_of_memory;

/* A torch.save in the loop (--checkpoint-every): each tensor copied to pageable memory, then
   serialized and written out before the next. */
NOINLINE_JOB void save_checkpoint(char *staging) {
    int out = open("/dev/null", O_WRONLY);
    for (int t = 0; t < 8; t++) {
        rt_memcpy_async(staging, device_buf, 4 << 20, D2H, 0);
        rt_stream_sync(0);
        compute_on_host(5000);
        if (out >= 0 && write(out, staging, 4 << 20) < 0) die("writing the checkpoint");
    }
    if (out >= 0) close(out);
}

/* A start-up on the launching thread: a warm-up of 2000 launches and a sync, then
 * --startup-read bytes read once. */
static void startup_read(void) {
    for (int i = 0; i < 2000; i++) drv_launch(&kernel, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
    rt_stream_sync(0);
    int fd = open(opt.read_file, O_RDONLY | O_DIRECT);
    void *buf;
    if (fd < 0 || posix_memalign(&buf, 4096, 1 << 20)) die("cannot set up --startup-read");
    for (long left = opt.startup_read; left > 0;) {
        ssize_t n = read(fd, buf, 1 << 20);
        if (n == 0 && lseek(fd, 0, SEEK_SET) == 0) continue;
        if (n <= 0) die("short read");
        left -= n;
    }
    close(fd);
    free(buf);
}

static void *worker(void *arg) {
    (void)arg;
    dim3 one = {1, 1, 1};
    launch_config cfg = {1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
    char *pageable = opt.pageable_h2d ? malloc(opt.pageable_h2d) : NULL;
    char *staging = opt.checkpoint_every ? calloc(1, 4 << 20) : NULL;
    int data_fd = -1;
    void *data_buf = NULL;
    if (opt.read_per_step) {
        data_fd = open(opt.read_file, O_RDONLY | O_DIRECT);
        if (data_fd < 0 || posix_memalign(&data_buf, 4096, (size_t)opt.read_per_step)) die("cannot set up --read-per-step");
    }
    if (pageable) memset(pageable, 1, opt.pageable_h2d);
    char *rows_2d = opt.copy2d ? calloc(COPY_ROWS, opt.copy2d / COPY_ROWS + 64) : NULL;
    char *rows_3d = opt.copy3d ? calloc(1, opt.copy3d) : NULL;
    uint64_t vmm_base = 0;
    if (opt.vmm && drv_mem_address_reserve(&vmm_base, (size_t)opt.vmm * VMM_CHUNK, 0, 0, 0)) die("cuMemAddressReserve failed");
    int scalar;
    struct cache cache = {.n = 0};
    if (opt.startup_read) startup_read();
    if (opt.sleep_once_ms) usleep((useconds_t)opt.sleep_once_ms * 1000);
    for (int s = 0; s < opt.steps; s++) {
        if (opt.pipe_worker_us) {
            char item;
            if (read(feeder_rd, &item, 1) != 1) die("the feeder closed its pipe");
        }
        long host_us = nccl_comm && nccl_rank == opt.ranks - 1 && opt.straggler_host_us ? opt.straggler_host_us : opt.host_us;
        if (host_us) compute_on_host(host_us);
        if (torch_cpu_op) make_batch_through_the_framework();
        if (pageable) {
            rt_memcpy_async(device_buf, pageable, opt.pageable_h2d, 1, 0);
            rt_stream_sync(0);
        }
        if (pinned_buf) rt_memcpy_async(device_buf, pinned_buf, opt.pinned_h2d, 1, 0);
        if (rows_2d) copy_2d(rows_2d);
        for (int i = 0; i < opt.bad_copy2d; i++)
            if (drv_memcpy_2d(NULL) == 0) die("cuMemcpy2D_v2(NULL) succeeded");
        for (int i = 0; i < opt.runtime_launches; i++) rt_launch(&kernel, one, one, 0, 0, 0);
        for (int i = 0; i < opt.driver_launches; i++) drv_launch(&kernel, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
        for (int i = 0; i < opt.ex_launches; i++) drv_launch_ex(&cfg, &kernel, 0, 0);
        for (int i = 0; i < opt.graphs; i++) rt_graph(&graph, 0);
        if (rows_3d) copy_3d(rows_3d);
        if (pinned_d2h_buf) {
            rt_memcpy_async(pinned_d2h_buf, device_buf, opt.blocking_d2h, D2H, 0);
            rt_stream_sync(0);
        }
        if (nccl_comm && opt.allreduce_bytes) {
            if (nccl_all_reduce(device_buf, device_buf, (size_t)opt.allreduce_bytes / 4, 7, 0, nccl_comm, 0)) die("ncclAllReduce failed");
            rt_stream_sync(0);
        }
        for (int i = 0; i < opt.item; i++) read_scalar(&scalar);
        for (int i = 0; i < opt.item_sync; i++) read_scalar_sync(&scalar);
        for (int i = 0; i < opt.alloc_churn; i++) {
            void *p;
            if (rt_malloc(&p, 1 << 20) == 0) rt_free(p);
        }
        if (opt.vmm) vmm_cycle(vmm_base);
        if (opt.leak) keep_activations(opt.leak);
        if (opt.cache_pct) {
            size_t pct = (size_t)opt.cache_pct + 5 * (size_t)(s % 4);
            if (cached_malloc(&cache, ((size_t)opt.device_memory_mib << 20) / 100 * pct)) die("cached_malloc failed after its retry");
        }
        if (opt.sync) rt_device_sync();
        if (staging && s % opt.checkpoint_every == opt.checkpoint_every - 1) save_checkpoint(staging);
        if (opt.sleep_ms) usleep((useconds_t)opt.sleep_ms * 1000);
        if (data_fd >= 0 && read(data_fd, data_buf, (size_t)opt.read_per_step) < opt.read_per_step) {
            lseek(data_fd, 0, SEEK_SET); /* wrap around at the end of the file */
        }
    }
    if (opt.oom_at_end && cached_malloc(&cache, opt.oom_at_end)) {
        fprintf(stderr, "out of memory\n");
        out_of_memory = 1;
    }
    release_cache(&cache);
    if (data_fd >= 0) close(data_fd);
    free(data_buf);
    if (vmm_base) drv_mem_address_free(vmm_base, (size_t)opt.vmm * VMM_CHUNK);
    /* With --hold-ms the host buffers stay mapped through the hold, as a real job's buffers
     * do: copies are classified from the live memory map, and a reader that is late (short of
     * CPU on two cores beside the spinning fake GPU) must still find them there. */
    if (!opt.hold_ms) {
        free(pageable);
        free(staging);
        free(rows_2d);
        free(rows_3d);
    }
    return NULL;
}

/* A data-loader worker feeding the training loop through a pipe: U µs of CPU per item. */
static pid_t start_feeder(void) {
    int fds[2];
    if (pipe(fds)) die("pipe");
    pid_t pid = fork();
    if (pid != 0) {
        close(fds[1]);
        feeder_rd = fds[0];
        return pid;
    }
    close(fds[0]);
    int data_fd = -1;
    void *data = NULL;
    if (opt.pipe_worker_read) {
        data_fd = open(opt.read_file, O_RDONLY | O_DIRECT);
        if (data_fd < 0 || posix_memalign(&data, 4096, (size_t)opt.pipe_worker_read)) die("cannot set up --pipe-worker-read");
    }
    long items = (long)opt.steps * (opt.threads > 64 ? 64 : opt.threads);
    for (long i = 0; i < items; i++) {
        if (data_fd >= 0 && read(data_fd, data, (size_t)opt.pipe_worker_read) < opt.pipe_worker_read) lseek(data_fd, 0, SEEK_SET);
        uint64_t until = now_ns() + (uint64_t)opt.pipe_worker_us * 1000;
        while (now_ns() < until) {
        }
        if (write(fds[1], "x", 1) != 1) _exit(1);
    }
    _exit(0);
}

/* A data-loader worker: read the file with O_DIRECT so every byte is a block request. */
static pid_t start_reader(void) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    int fd = open(opt.read_file, O_RDONLY | O_DIRECT);
    if (fd < 0) die("cannot open --read-file with O_DIRECT");
    void *buf;
    if (posix_memalign(&buf, 4096, 1 << 20)) die("posix_memalign");
    long left = opt.read_bytes;
    while (left > 0) {
        ssize_t n = read(fd, buf, 1 << 20);
        if (n <= 0) die("short read");
        left -= n;
    }
    _exit(0);
}

static void run_workload(void) {
    pthread_t tids[64];
    int n = opt.threads > 64 ? 64 : opt.threads;
    for (int i = 0; i < n; i++)
        if (pthread_create(&tids[i], NULL, worker, NULL)) die("pthread_create failed");
    for (int i = 0; i < n; i++) pthread_join(tids[i], NULL);
}

static long num(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || v < 0) die("bad number");
    return v;
}

/* The communicator's unique id, passed from the launcher to its ranks. */
#define RANK_ID_ENV "FAKE_NCCL_UNIQUE_ID"
static char **job_argv;

/* --ranks, in a rank (started by the launcher with RANK and the unique id in its environment):
 * join the communicator. Returns 0 where this process is no rank. */
static int join_as_rank(void) {
    const char *id_text = getenv(RANK_ID_ENV), *rank = getenv("RANK");
    if (!id_text || !rank) return 0;
    nccl_unique_id id;
    memset(&id, 0, sizeof id);
    snprintf(id.internal, sizeof id.internal, "%s", id_text);
    nccl_rank = (int)num(rank);
    if (nccl_comm_init_rank(&nccl_comm, opt.ranks, id, nccl_rank)) die("ncclCommInitRank failed");
    return 1;
}

/* --ranks, in the launcher: start the ranks as torchrun does, each this program again with
 * RANK, LOCAL_RANK and WORLD_SIZE in its environment; returns once they are all done. */
static void start_ranks(void) {
    if (opt.ranks > 16) die("--ranks takes at most 16");
    nccl_unique_id id;
    if (nccl_get_unique_id(&id)) die("ncclGetUniqueId failed");
    pid_t pids[16];
    for (int r = 0; r < opt.ranks; r++) {
        pids[r] = fork();
        if (pids[r] < 0) die("fork");
        if (pids[r] == 0) {
            char v[16];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", opt.ranks);
            setenv("WORLD_SIZE", v, 1);
            setenv(RANK_ID_ENV, id.internal, 1);
            execv("/proc/self/exe", job_argv);
            die("execv");
        }
    }
    int failed = 0;
    for (int r = 0; r < opt.ranks; r++) {
        int status;
        failed |= waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    char path[200];
    snprintf(path, sizeof path, "/dev/shm/%s", id.internal);
    unlink(path);
    printf("done %d\n", getpid());
    if (failed) die("a rank failed");
}


int main(int argc, char **argv) {
    job_argv = argv;
    ssize_t len = readlink("/proc/self/exe", opt.lib_dir, sizeof opt.lib_dir - 1);
    if (len > 0) {
        opt.lib_dir[len] = 0;
        char *slash = strrchr(opt.lib_dir, '/');
        if (slash) *slash = 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
#define FLAG(name, field) if (!strcmp(a, name)) { opt.field = 1; continue; }
#define NUM(name, field) if (!strcmp(a, name)) { opt.field = num(v); i++; continue; }
        FLAG("--gate", gate) FLAG("--sync", sync) FLAG("--fork", fork) FLAG("--load-after-gate", load_after_gate)
        FLAG("--pin-after-gate", pin_after_gate) FLAG("--print-time", print_time)
        NUM("--threads", threads) NUM("--steps", steps) NUM("--runtime-launches", runtime_launches)
        NUM("--driver-launches", driver_launches) NUM("--ex-launches", ex_launches) NUM("--graphs", graphs)
        NUM("--kernel-us", kernel_us) NUM("--host-us", host_us) NUM("--torch-prep-us", torch_prep_us) NUM("--pageable-h2d", pageable_h2d)
        NUM("--pinned-h2d", pinned_h2d) NUM("--item", item) NUM("--item-sync", item_sync) NUM("--alloc-churn", alloc_churn)
        NUM("--settle-ms", settle_ms) NUM("--hold-ms", hold_ms) NUM("--device-memory-mib", device_memory_mib) NUM("--sleep-ms", sleep_ms) NUM("--sleep-once-ms", sleep_once_ms) NUM("--read-bytes", read_bytes) NUM("--read-per-step", read_per_step) NUM("--startup-read", startup_read)
        NUM("--copy2d", copy2d) NUM("--copy3d", copy3d) NUM("--vmm", vmm) NUM("--bad-copy2d", bad_copy2d) NUM("--blocking-d2h", blocking_d2h) NUM("--pipe-worker-us", pipe_worker_us) NUM("--pipe-worker-read", pipe_worker_read)
        NUM("--ranks", ranks) NUM("--allreduce-bytes", allreduce_bytes) NUM("--straggler-host-us", straggler_host_us)
        NUM("--checkpoint-every", checkpoint_every) NUM("--leak", leak) NUM("--cache-pct", cache_pct) NUM("--oom-at-end", oom_at_end) NUM("--idle-children", idle_children)
        if (!strcmp(a, "--read-file")) { snprintf(opt.read_file, sizeof opt.read_file, "%s", v); i++; continue; }
        if (!strcmp(a, "--lib-dir")) { snprintf(opt.lib_dir, sizeof opt.lib_dir, "%s", v); i++; continue; }
        fprintf(stderr, "fakejob: unknown argument %s\n", a);
        return 2;
    }
    if ((opt.cache_pct || opt.oom_at_end) && !opt.device_memory_mib) die("--cache-pct and --oom-at-end need --device-memory-mib");
    if (opt.copy2d % COPY_ROWS || opt.copy3d % COPY_ROWS) die("--copy2d and --copy3d take a multiple of 16 bytes");
    if (opt.copy2d > (64 << 20) || opt.copy3d > (64 << 20)) die("--copy2d and --copy3d copy at most the 64 MiB device buffer");
    if (opt.vmm > VMM_MAX) die("--vmm takes at most 64");
    if (opt.blocking_d2h > (64 << 20)) die("--blocking-d2h copies at most the 64 MiB device buffer");
    kernel.duration_ns = (uint64_t)opt.kernel_us * 1000;
    graph.duration_ns = kernel.duration_ns * 10;

    if (!opt.load_after_gate) {
        load_cuda();
        if (!opt.pin_after_gate) pin_buffer();
    }
    pid_t job = getpid();
    for (int i = 0; i < opt.idle_children; i++) {
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != job) _exit(0); /* the job died before prctl took effect */
            for (;;) pause();
        }
    }
    if (opt.gate && !getenv(RANK_ID_ENV)) {
        printf("ready %d\n", getpid());
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) die("gate closed");
    }
    if (opt.load_after_gate) load_cuda();
    if (opt.settle_ms) usleep((useconds_t)opt.settle_ms * 1000);
    if (opt.ranks && !join_as_rank()) {
        start_ranks();
        return 0; /* the launcher, once every rank is done */
    }
    if (opt.load_after_gate || opt.pin_after_gate) pin_buffer();
    if (rt_malloc(&device_buf, 64 << 20)) die("cudaMalloc failed");
    pid_t reader = opt.read_file[0] && !opt.read_per_step ? start_reader() : 0;
    pid_t feeder = opt.pipe_worker_us ? start_feeder() : 0;
    pid_t child = opt.fork ? fork() : 0;
    uint64_t t0 = now_ns();
    run_workload();
    if (opt.print_time) {
        rt_device_sync();
        printf("work_ns %llu\n", (unsigned long long)(now_ns() - t0));
    }
    if (feeder > 0) waitpid(feeder, NULL, 0);
    if (opt.hold_ms) {
        printf("holding %d\n", getpid());
        fflush(stdout);
        usleep((useconds_t)opt.hold_ms * 1000);
    }
    if (reader > 0 && child == 0 && !opt.fork) waitpid(reader, NULL, 0);
    if (reader > 0 && opt.fork && child > 0) waitpid(reader, NULL, 0);
    rt_free(device_buf);
    if (nccl_comm) nccl_comm_destroy(nccl_comm);
    if (opt.fork && child > 0) waitpid(child, NULL, 0);
    if (opt.gate || child > 0 || !opt.fork) printf("done %d\n", getpid());
    return out_of_memory ? 3 : 0;
}
