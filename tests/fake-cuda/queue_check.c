/* Checks the fake GPU's queue against what a real GPU does (tests/tests/fake_gpu.rs runs it):
 * the queue depth at which a launch blocks, streams as separate FIFOs, the legacy default
 * stream waiting for the others, events and queries reading the timeline, and a process that
 * exits paying for the work it left queued. Each check prints one line, "name value"; a
 * failed expectation prints "FAIL ..." and the program exits 1.
 *
 * Linked against the fake libcuda.so.1 (builder.rs); FAKE_GPU_QUEUE_DEPTH may lower the depth
 * to keep the run short. */
#define _GNU_SOURCE
#include "fake_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failed;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void expect(int ok, const char *what, double value) {
    if (!ok) {
        printf("FAIL %s (%.6f)\n", what, value);
        failed = 1;
    }
}

static void launch(struct fake_kernel *k, CUstream s) { cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s, 0, 0); }

/* Tiny launches behind a long kernel until one blocks: the index of the one that blocked. */
static long pending_when_blocked(long depth) {
    struct fake_kernel hold = {200000000ull}, tiny = {1000};
    cuCtxSynchronize();
    launch(&hold, 0);
    long blocked = -1;
    for (long i = 0; i < depth + 10 && blocked < 0; i++) {
        double t = now_s();
        launch(&tiny, 0);
        if (now_s() - t > 0.05) blocked = i;
    }
    cuCtxSynchronize();
    return blocked;
}

int main(void) {
    const char *d = getenv("FAKE_GPU_QUEUE_DEPTH");
    long depth = d ? strtol(d, NULL, 10) : 1022;
    cuInit(0);

    /* 1. The depth: `depth` items pending (the long kernel among them) block the next launch. */
    long blocked = pending_when_blocked(depth);
    printf("pending_when_blocked %ld\n", blocked);
    expect(blocked == depth - 1, "a launch blocks once the stream holds the queue's depth", (double)blocked);

    /* 2. Streams are separate FIFOs: a created stream's short work is not held behind another
     *    created stream's long kernel. */
    CUstream a, b;
    expect(cuStreamCreate(&a, 0) == CUDA_SUCCESS && cuStreamCreate(&b, 0) == CUDA_SUCCESS, "streams are created", 0);
    struct fake_kernel long_k = {100000000ull}, short_k = {1000};
    double t = now_s();
    launch(&long_k, a);
    launch(&short_k, b);
    cuStreamSynchronize(b);
    double other = now_s() - t;
    printf("other_stream_sync_s %.6f\n", other);
    expect(other < 0.05, "a stream does not wait for another's work", other);
    expect(cuStreamQuery(a) == CUDA_ERROR_NOT_READY, "a busy stream's query says not ready", 0);
    expect(cuStreamQuery(b) == CUDA_SUCCESS, "an idle stream's query says done", 0);

    /* 3. Events read the timeline: recorded behind the long kernel, not ready until it ends. */
    CUevent e;
    expect(cuEventCreate(&e, 0) == CUDA_SUCCESS, "an event is created", 0);
    cuEventRecord(e, a);
    expect(cuEventQuery(e) == CUDA_ERROR_NOT_READY, "an event behind running work is not ready", 0);
    cuEventSynchronize(e);
    double waited = now_s() - t;
    printf("event_sync_s %.6f\n", waited);
    expect(waited >= 0.099, "the event's sync waits for the work before it", waited);
    expect(cuEventQuery(e) == CUDA_SUCCESS && cuStreamQuery(a) == CUDA_SUCCESS, "done once it ended", 0);

    /* 4. The legacy default stream waits for every stream's work. */
    t = now_s();
    launch(&long_k, a);
    cuStreamSynchronize(0);
    double legacy = now_s() - t;
    printf("default_stream_sync_s %.6f\n", legacy);
    expect(legacy >= 0.099, "a sync of the default stream waits for the other streams", legacy);
    cuEventDestroy_v2(e);
    cuStreamDestroy_v2(a);
    cuStreamDestroy_v2(b);

    /* 5. Work runs whether or not anyone waits, and a process that exits pays for what it left
     *    queued: 300 kernels of 1 ms, no sync, then exit. */
    fflush(stdout);
    t = now_s();
    pid_t child = fork();
    if (child == 0) {
        struct fake_kernel ms = {1000000ull};
        for (int i = 0; i < 300; i++) launch(&ms, 0);
        exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    double lived = now_s() - t;
    printf("exit_with_queued_work_s %.6f\n", lived);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exits cleanly", (double)status);
    expect(lived >= 0.299, "an exiting process pays for its queued kernels", lived);
    return failed;
}
