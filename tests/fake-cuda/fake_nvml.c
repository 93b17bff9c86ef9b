/* A fake NVML (libnvidia-ml.so.1) for one fake GPU, whose utilization is the fake CUDA's own
 * busy time, read from the ledger that libcuda.c publishes (FAKE_GPU_LEDGER, inherited from
 * the environment). Built into its own folder: only a test that puts it on the loader path
 * gives gputrace an NVML; every other test keeps seeing none.
 *
 * The signatures and struct layouts are nvml.h's (as nvml-wrapper-sys binds them). Only what
 * gputrace reads is here: identity, memory, utilization (`utilization.gpu` and the sample
 * buffer) and the compute process list, and what `gputrace doctor` reads (the PCIe link,
 * throttle reasons, persistence mode, the CUDA version), when a test plants it (at the end),
 * and a GPU lost from the bus mid-run (`gone`). FAKE_NVML_LOST_FIRST set: two devices are
 * counted and the first cannot be opened (lost from the bus before the run), so the fake GPU
 * is NVML's device 1.
 * Everything else (GPM, power, clocks, PCIe throughput, process utilization, graphics
 * processes) is absent: nvml-wrapper
 * resolves each symbol on first use and reports a missing one as an error of that call
 * only, which gputrace reads as "not available".
 *
 * Busy time is known exactly only at the moment the ledger is read (fake_gpu_ledger.h), so
 * every utilization call takes a reading; the sample buffer's slices end between readings
 * and are interpolated linearly between the two around them (gputrace reads 10 times a
 * second, the slices are 1/6 s). */
#define _GNU_SOURCE
#include "fake_gpu_ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* nvml.h */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef unsigned nvmlSamplingType_t;
typedef unsigned nvmlValueType_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_GPU_UTILIZATION_SAMPLES 1
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFu

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef union {
    double dVal;
    int siVal;
    unsigned uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    unsigned short usVal;
} nvmlValue_t;
typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;
/* nvmlProcessInfo_t of the _v3 process queries (nvmlProcessInfo_v2_t). */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;

_Static_assert(sizeof(nvmlMemory_v2_t) == 40 && sizeof(nvmlPciInfo_t) == 68 && sizeof(nvmlSample_t) == 16 &&
               sizeof(nvmlProcessInfo_t) == 24,
               "nvml.h layouts");

/* The one device. Its memory is a fixed size: gputrace reads the total once, at start, when
 * the job (and its ledger) may not exist yet. */
static const unsigned long long MEMORY_TOTAL = 80ull << 30;
static const char NAME[] = "Fake GPU (gputrace tests)";
static const char UUID[] = "GPU-fa4e0000-0000-4000-8000-000000000000";
static const char BUS_ID[] = "00000000:01:00.0";
static const char DRIVER_VERSION[] = "fake-1";
static struct nvmlDevice_st { int unused; } the_device;

/* The driver's sample period: about 1/6 s on recent drivers. */
#define SAMPLE_NS 166666667ull
#define MAX_SAMPLES 256 /* ~43 s of history, as the driver keeps a bounded buffer */
#define HISTORY_SAMPLES 12 /* idle slices before init: 2 s */

/* One reading of the ledger: when (monotonic) and the busy time up to then. */
struct reading { uint64_t at_ns, busy_ns; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int inits;                        /* nvmlInit calls not shut down yet */
static const struct fake_gpu_ledger *ledger;
static uint64_t init_ns, init_wall_us;   /* the clocks at the first init: the samples' grid */
static struct reading last;              /* the newest reading */
static uint64_t busy_base_ns, last_raw_busy_ns;
static struct reading util_prev;         /* nvmlDeviceGetUtilizationRates' previous call */
static unsigned util_prev_pct;
/* The sample buffer: a ring of the newest MAX_SAMPLES; `next_slice` is the index (from init)
 * of the next slice to end, `slice_start` its start's busy time. */
static struct { uint64_t stamp_us; unsigned pct; } samples[MAX_SAMPLES];
static uint64_t samples_made, next_slice;
static struct reading slice_start;

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Map the ledger once it exists and is filled in (the job creates it when it loads libcuda,
 * usually after gputrace has started NVML). Called with `lock` held. */
static const struct fake_gpu_ledger *find_ledger(void) {
    if (ledger) return ledger;
    const char *path = getenv("FAKE_GPU_LEDGER");
    if (!path || !*path) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    /* Mapping past the end of a file faults on access: map only a file already sized. */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size >= sizeof *ledger)
        m = mmap(NULL, sizeof *ledger, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) ledger = m;
    return ledger;
}

struct snapshot { uint64_t enqueued_ns, queue_end_ns, memory_used, pid; };

/* A consistent copy of the ledger: 1; 0 if there is no ledger yet (or it is being set up for
 * a new job); -1 if a writer stayed inside its write (preempted, or died there). */
static int snapshot(struct snapshot *s) {
    const struct fake_gpu_ledger *l = find_ledger();
    if (!l) return 0;
    for (int tries = 0; tries < 1000; tries++) {
        if (__atomic_load_n(&l->magic, __ATOMIC_ACQUIRE) != FAKE_GPU_LEDGER_MAGIC) return 0;
        uint64_t seq = __atomic_load_n(&l->seq, __ATOMIC_ACQUIRE);
        if (seq & 1) {
            sched_yield(); /* on a busy machine the writer may be waiting for this CPU */
            continue;
        }
        s->enqueued_ns = LEDGER_LOAD(&l->enqueued_ns);
        s->queue_end_ns = LEDGER_LOAD(&l->queue_end_ns);
        s->memory_used = LEDGER_LOAD(&l->memory_used);
        s->pid = LEDGER_LOAD(&l->pid);
        __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the values are read before seq again */
        if (LEDGER_LOAD(&l->seq) == seq) return 1;
    }
    return -1;
}

/* The process holding the fake GPU, or 0: the ledger's pid while that process lives. */
static unsigned holder(const struct snapshot *s) {
    if (!s->pid || s->pid > 0x7fffffff) return 0;
    if (kill((pid_t)s->pid, 0) != 0 && errno != EPERM) return 0;
    return (unsigned)s->pid;
}

/* Busy time up to `at` from the newest reading before it (linear in between; busy time
 * grows at most as fast as time, which the line between two readings respects). */
static uint64_t busy_at(const struct reading *a, const struct reading *b, uint64_t at) {
    if (at <= a->at_ns || b->at_ns <= a->at_ns) return a->busy_ns;
    if (at >= b->at_ns) return b->busy_ns;
    return a->busy_ns + (uint64_t)((double)(b->busy_ns - a->busy_ns) * (double)(at - a->at_ns) / (double)(b->at_ns - a->at_ns));
}

static unsigned pct(uint64_t busy, uint64_t span) {
    if (!span) return 0;
    double p = 100.0 * (double)busy / (double)span;
    return p >= 100.0 ? 100u : (unsigned)(p + 0.5);
}

/* Read the ledger now; the sample buffer gets every slice that ended since the last reading.
 * Called with `lock` held. */
static void take_reading(void) {
    struct snapshot s;
    uint64_t raw = 0;
    int have = snapshot(&s);
    if (have < 0) return; /* no reading this time: the next one covers the time */
    uint64_t now = clock_ns(CLOCK_MONOTONIC); /* after the snapshot: the formula holds at now */
    if (have) {
        uint64_t pending = s.queue_end_ns > now ? s.queue_end_ns - now : 0;
        raw = s.enqueued_ns > pending ? s.enqueued_ns - pending : 0;
    }
    /* A new job on the same ledger starts again from 0: keep the total growing. */
    if (raw < last_raw_busy_ns) busy_base_ns += last_raw_busy_ns;
    last_raw_busy_ns = raw;
    struct reading r = {now, busy_base_ns + raw};
    if (r.busy_ns < last.busy_ns) r.busy_ns = last.busy_ns;
    for (;;) {
        uint64_t end = init_ns + (next_slice + 1) * SAMPLE_NS;
        if (end > now) break;
        uint64_t busy_end = busy_at(&last, &r, end);
        samples[samples_made % MAX_SAMPLES].stamp_us = init_wall_us + (end - init_ns) / 1000;
        samples[samples_made % MAX_SAMPLES].pct = pct(busy_end - slice_start.busy_ns, end - slice_start.at_ns);
        samples_made++;
        next_slice++;
        slice_start = (struct reading){end, busy_end};
    }
    last = r;
}

API const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

API nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    if (inits++ == 0) {
        /* The slices are counted from here. */
        init_ns = clock_ns(CLOCK_MONOTONIC);
        init_wall_us = clock_ns(CLOCK_REALTIME) / 1000;
        samples_made = next_slice = 0;
        last = (struct reading){init_ns, last.busy_ns};
        take_reading();
        util_prev = slice_start = last;
        util_prev_pct = 0;
        /* A driver's buffer holds the time before its client's init too. The fake GPU's is
         * known only while nothing has run on it (idle); after that there is none. */
        if (last.busy_ns == 0) {
            for (uint64_t k = HISTORY_SAMPLES; k >= 1; k--) {
                samples[samples_made % MAX_SAMPLES].stamp_us = init_wall_us - (k - 1) * (SAMPLE_NS / 1000);
                samples[samples_made % MAX_SAMPLES].pct = 0;
                samples_made++;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

API nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t r = inits ? (inits--, NVML_SUCCESS) : NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The GPU fell off the bus (as Xid 79 does): while the file FAKE_NVML_GONE names exists,
 * every device call fails with NVML_ERROR_GPU_IS_LOST, as the real library's do then. */
static int gone(void) {
    const char *path = getenv("FAKE_NVML_GONE");
    return path && *path && access(path, F_OK) == 0;
}

static int initialized(void) {
    pthread_mutex_lock(&lock);
    int yes = inits > 0;
    pthread_mutex_unlock(&lock);
    return yes;
}

/* The checks every device call makes, as the real library does. */
#define CHECK_DEVICE(dev, out)                                   \
    do {                                                         \
        if (!initialized()) return NVML_ERROR_UNINITIALIZED;     \
        if (gone()) return NVML_ERROR_GPU_IS_LOST;               \
        if ((dev) != &the_device || !(out)) return NVML_ERROR_INVALID_ARGUMENT; \
    } while (0)

static nvmlReturn_t copy_string(char *out, unsigned length, const char *s) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, DRIVER_VERSION);
}

/* The fake GPU's index: 1 where a lost device 0 is planted (FAKE_NVML_LOST_FIRST). */
static unsigned fake_index(void) {
    return getenv("FAKE_NVML_LOST_FIRST") ? 1 : 0;
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = fake_index() + 1;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (gone()) return NVML_ERROR_GPU_IS_LOST;
    if (index < fake_index()) return NVML_ERROR_GPU_IS_LOST;
    if (index != fake_index() || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &the_device;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length) {
    CHECK_DEVICE(device, name);
    return copy_string(name, length, NAME);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length) {
    CHECK_DEVICE(device, uuid);
    return copy_string(uuid, length, UUID);
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    CHECK_DEVICE(device, pci);
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:01:00.0");
    snprintf(pci->busId, sizeof pci->busId, "%s", BUS_ID);
    pci->bus = 1;
    pci->pciDeviceId = 0x233510de; /* an H200's device and vendor ids */
    return NVML_SUCCESS;
}

/* The job holding the fake GPU (0: none) and its bytes. Under `lock`, as every read of the
 * ledger: the first maps it, and NVML may be called from several threads. */
static unsigned job(unsigned long long *bytes) {
    struct snapshot s;
    pthread_mutex_lock(&lock);
    unsigned pid = snapshot(&s) == 1 ? holder(&s) : 0;
    pthread_mutex_unlock(&lock);
    *bytes = pid ? s.memory_used : 0;
    return pid;
}

/* Bytes in use: what the job allocated, while it lives. */
static unsigned long long memory_used(void) {
    unsigned long long bytes;
    job(&bytes);
    return bytes;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    CHECK_DEVICE(device, memory);
    memory->total = MEMORY_TOTAL;
    memory->used = memory_used();
    memory->free = MEMORY_TOTAL - memory->used;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    CHECK_DEVICE(device, memory);
    memory->total = MEMORY_TOTAL;
    memory->reserved = 0;
    memory->used = memory_used();
    memory->free = MEMORY_TOTAL - memory->used;
    return NVML_SUCCESS;
}

/* `utilization.gpu`: the busy share of the time since the previous call (or since init);
 * the real driver averages over its own sample period. Memory utilization is not simulated. */
API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    CHECK_DEVICE(device, utilization);
    pthread_mutex_lock(&lock);
    take_reading();
    if (last.at_ns > util_prev.at_ns) {
        util_prev_pct = pct(last.busy_ns - util_prev.busy_ns, last.at_ns - util_prev.at_ns);
        util_prev = last;
    }
    utilization->gpu = util_prev_pct;
    utilization->memory = 0;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

/* The sample buffer, GPU utilization only: each sample is the busy percent of one slice,
 * stamped with the wall-clock µs of its end. NULL `samples` asks for the count. */
API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long lastSeenTimeStamp,
                                      nvmlValueType_t *sampleValType, unsigned *sampleCount, nvmlSample_t *samples_out) {
    CHECK_DEVICE(device, sampleCount);
    if (type != NVML_GPU_UTILIZATION_SAMPLES) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&lock);
    take_reading();
    uint64_t oldest = samples_made > MAX_SAMPLES ? samples_made - MAX_SAMPLES : 0, first = samples_made;
    for (uint64_t i = oldest; i < samples_made; i++) {
        if (samples[i % MAX_SAMPLES].stamp_us > lastSeenTimeStamp) {
            first = i;
            break;
        }
    }
    unsigned n = (unsigned)(samples_made - first);
    nvmlReturn_t r = NVML_SUCCESS;
    if (n == 0) {
        r = NVML_ERROR_NOT_FOUND; /* what the driver says when nothing is newer */
    } else if (!samples_out) {
        *sampleCount = n;
    } else {
        /* Oldest first; more may have ended since the caller counted them: they come next time. */
        if (n > *sampleCount) n = *sampleCount;
        for (unsigned k = 0; k < n; k++) {
            samples_out[k].timeStamp = samples[(first + k) % MAX_SAMPLES].stamp_us;
            samples_out[k].sampleValue.uiVal = samples[(first + k) % MAX_SAMPLES].pct;
        }
        *sampleCount = n;
    }
    if (sampleValType) *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The job, while it lives, with the memory it allocated; no MIG instances. */
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned *infoCount, nvmlProcessInfo_t *infos) {
    CHECK_DEVICE(device, infoCount);
    unsigned long long bytes;
    unsigned pid = job(&bytes);
    unsigned n = pid ? 1 : 0;
    if (*infoCount < n || (n && !infos)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *infoCount = n;
    if (n) {
        infos[0].pid = pid;
        infos[0].usedGpuMemory = bytes;
        infos[0].gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
        infos[0].computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT;
    }
    return NVML_SUCCESS;
}

/* What `gputrace doctor` reads, planted by the test through the environment; without it,
 * each is "not supported" on this GPU (the doctor then skips that check):
 *   FAKE_NVML_PCIE="GEN,MAX_GEN,WIDTH,MAX_WIDTH"  FAKE_NVML_THROTTLE=reason bits
 *   FAKE_NVML_PERSISTENCE=0|1                     FAKE_NVML_CUDA_VERSION=12040 (12.4) */
static int pcie_field(int i, unsigned *out) {
    const char *v = getenv("FAKE_NVML_PCIE");
    unsigned f[4];
    if (!v || sscanf(v, "%u,%u,%u,%u", &f[0], &f[1], &f[2], &f[3]) != 4) return NVML_ERROR_NOT_SUPPORTED;
    *out = f[i];
    return NVML_SUCCESS;
}

/* The four PCIe link figures, fields 0 to 3 of FAKE_NVML_PCIE. */
#define PCIE_GETTER(name, field)                                     \
    API nvmlReturn_t name(nvmlDevice_t device, unsigned *out) {      \
        CHECK_DEVICE(device, out);                                   \
        return pcie_field(field, out);                               \
    }
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, 0)
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, 1)
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkWidth, 2)
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkWidth, 3)

/* FAKE_NVML_NVLINKS=N: links 0..N-1 active, the rest inactive; without it NVLink is "not
 * supported" here, as on a PCIe card. */
API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int *is_active) {
    CHECK_DEVICE(device, is_active);
    const char *v = getenv("FAKE_NVML_NVLINKS");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *is_active = link < strtoul(v, NULL, 10);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    CHECK_DEVICE(device, reasons);
    const char *v = getenv("FAKE_NVML_THROTTLE");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *reasons = strtoull(v, NULL, 0);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned *mode) {
    CHECK_DEVICE(device, mode);
    const char *v = getenv("FAKE_NVML_PERSISTENCE");
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *mode = (unsigned)atoi(v);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    const char *v = getenv("FAKE_NVML_CUDA_VERSION");
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    *version = atoi(v);
    return NVML_SUCCESS;
}
