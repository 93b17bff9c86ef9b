/* The fake GPU's ledger: what libcuda.c publishes of its simulated timeline, in a file named by
 * FAKE_GPU_LEDGER and mapped MAP_SHARED, for the fake NVML (fake_nvml.c) to read from another
 * process (gputrace). Busy time (a kernel running: NVML's utilization counts kernels, not
 * copies) up to CLOCK_MONOTONIC time t is
 *     enqueued_ns - max(0, queue_end_ns - t)
 * since the device runs its kernels in order without gaps once they are queued behind one
 * another: kernel time queued but not done yet is not busy time. The formula is exact only for
 * the values as of t, so a reader takes its snapshot and then reads the clock.
 *
 * One writer process: the one that loaded libcuda and created the ledger (a forked child has
 * its own copy of the fake GPU and stops publishing). Its writers are serialized by libcuda's
 * mutex; readers in other processes use the seqlock: `seq` is odd while a write is under way. */
#ifndef FAKE_GPU_LEDGER_H
#define FAKE_GPU_LEDGER_H
#include <stdint.h>

/* "fakegpu1": set last by the writer, so a reader that maps the file before the writer has
 * filled it in sees no magic and tries again later. */
#define FAKE_GPU_LEDGER_MAGIC 0x31757067656b6166ull

struct fake_gpu_ledger {
    uint64_t magic;
    uint64_t seq;
    uint64_t enqueued_ns;  /* kernel ns ever queued (their union, where streams overlap) */
    uint64_t queue_end_ns; /* CLOCK_MONOTONIC ns when the last queued kernel is done */
    uint64_t memory_used;  /* device bytes allocated and not freed */
    uint64_t pid;          /* the process using the fake GPU; 0 once it has exited */
};

/* Every field is read and written with __atomic builtins: a plain access would be a data race
 * with the other process, which the compiler may assume does not happen. */
#define LEDGER_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define LEDGER_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#endif
