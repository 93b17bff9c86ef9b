/* A fake NCCL (libnccl.so.2) for the fake CUDA: the real entry points' names and signatures
 * (nccl.h, NCCL 2.28), each exported as `pnccl*` with `nccl*` a weak alias, as the real
 * library does.
 *
 * A collective is queued on the fake GPU and returns at once, as NCCL's does; the device
 * reaches it when the work queued before it is done, and it ends when every rank of the
 * communicator has reached it, plus its transfer time. The ranks are processes: each posts
 * when its device reaches a collective in a file mapped by all (named after the unique id),
 * and the fake libcuda settles the collective (waits for the others' posts) before any later
 * work or wait (fake_cuda_enqueue_collective in libcuda.c). A rank whose host is slow to
 * reach a collective so makes the others wait in their next synchronize: a straggler.
 *
 * FAKE_NCCL_BYTES_PER_US sets the link's rate (default 25000: 25 GB/s). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((noinline, visibility("default")))
/* `nccl*` resolves to `pnccl*`, as NCCL_API does it. */
#define ALIAS(name) __attribute__((weak, alias("p" #name)))

typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4 } ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
/* nccl.h's ncclDataType_t, by value. */
typedef int ncclDataType_t;
typedef int ncclRedOp_t;

#define MAX_RANKS 16
#define RING 256

/* What the ranks share: for each rank, how many collectives it has posted, and when its
 * device reached each of the last RING. */
struct shared {
    uint64_t posted[MAX_RANKS];
    uint64_t ready_ns[MAX_RANKS][RING];
};

struct ncclComm {
    int rank, nranks;
    struct shared *sh;
    uint64_t seq;
};

/* A collective in flight, until libcuda settles it (two: a second is queued while the first
 * is being settled). */
struct pending_op {
    struct ncclComm *comm;
    uint64_t seq, transfer_ns;
};
static struct pending_op ops[2];
static int next_op;

typedef uint64_t (*fake_pending_fn)(void *arg);
uint64_t fake_cuda_enqueue_collective(fake_pending_fn fn, void *arg);

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t type_size(ncclDataType_t t) {
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return t >= 0 && t < (int)(sizeof sizes / sizeof sizes[0]) ? sizes[t] : 0;
}

static uint64_t bytes_per_us(void) {
    const char *v = getenv("FAKE_NCCL_BYTES_PER_US");
    long n = v ? strtol(v, NULL, 10) : 0;
    return n > 0 ? (uint64_t)n : 25000;
}

/* Waits for every rank's post of the collective, then says when it ends. */
static uint64_t settle_op(void *arg) {
    struct pending_op *op = arg;
    struct shared *sh = op->comm->sh;
    uint64_t ready = 0;
    for (int r = 0; r < op->comm->nranks; r++) {
        while (__atomic_load_n(&sh->posted[r], __ATOMIC_ACQUIRE) <= op->seq) usleep(20);
        uint64_t t = __atomic_load_n(&sh->ready_ns[r][op->seq % RING], __ATOMIC_ACQUIRE);
        if (t > ready) ready = t;
    }
    return ready + op->transfer_ns;
}

/* Queue a collective moving `wire_bytes` over this rank's link. */
static ncclResult_t collective(ncclComm_t comm, uint64_t wire_bytes) {
    if (!comm || !comm->sh) return ncclInvalidArgument;
    struct pending_op *op = &ops[next_op];
    next_op ^= 1;
    op->comm = comm;
    op->seq = comm->seq++;
    op->transfer_ns = wire_bytes * 1000ull / bytes_per_us() + 5000;
    uint64_t ready = fake_cuda_enqueue_collective(settle_op, op);
    __atomic_store_n(&comm->sh->ready_ns[comm->rank][op->seq % RING], ready, __ATOMIC_RELEASE);
    __atomic_store_n(&comm->sh->posted[comm->rank], op->seq + 1, __ATOMIC_RELEASE);
    /* The host's cost of queueing it. */
    uint64_t until = now_ns() + 8000;
    while (now_ns() < until) {
    }
    return ncclSuccess;
}

/* Ring algorithms: what each rank sends of `bytes` among n ranks. */
static uint64_t ring_share(uint64_t bytes, int n, int twice) { return n > 1 ? bytes * (uint64_t)(twice ? 2 : 1) * (uint64_t)(n - 1) / (uint64_t)n : 0; }

API ncclResult_t pncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fakenccl-%d-%llu", (int)getpid(), (unsigned long long)now_ns());
    return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) ALIAS(ncclGetUniqueId);

API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (!comm || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    char path[200];
    id.internal[sizeof id.internal - 1] = 0;
    snprintf(path, sizeof path, "/dev/shm/%s", id.internal);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ncclSystemError;
    /* Every rank sizes it alike: only the first one's call grows it. */
    void *m = ftruncate(fd, sizeof(struct shared)) == 0 ? mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) return ncclSystemError;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->rank = rank;
    c->nranks = nranks;
    c->sh = m;
    *comm = c;
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) ALIAS(ncclCommInitRank);

API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    munmap(comm->sh, sizeof(struct shared));
    free(comm);
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) ALIAS(ncclCommDestroy);

API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
    *count = comm->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) ALIAS(ncclCommCount);

API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
    *rank = comm->rank;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) ALIAS(ncclCommUserRank);

API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)op; (void)stream;
    return collective(comm, ring_share(count * type_size(datatype), comm ? comm->nranks : 1, 1));
}
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) ALIAS(ncclAllReduce);

API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)stream;
    int n = comm ? comm->nranks : 1;
    return collective(comm, ring_share(sendcount * type_size(datatype) * (uint64_t)n, n, 0));
}
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
    ALIAS(ncclAllGather);

API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)op; (void)stream;
    int n = comm ? comm->nranks : 1;
    return collective(comm, ring_share(recvcount * type_size(datatype) * (uint64_t)n, n, 0));
}
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) ALIAS(ncclReduceScatter);

API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)root; (void)stream;
    return collective(comm, count * type_size(datatype));
}
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
    ALIAS(ncclBroadcast);

/* Eight arguments: `comm` and `stream` are passed on the stack (x86-64). */
API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                             cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)op; (void)root; (void)stream;
    return collective(comm, count * type_size(datatype));
}
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream) ALIAS(ncclReduce);

/* Point to point: in the fake, a send and its recv meet as a collective of the communicator
 * does (every rank calls one of them in turn). */
API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)peer; (void)stream;
    return collective(comm, count * type_size(datatype));
}
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) ALIAS(ncclSend);

API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
    (void)recvbuff; (void)peer; (void)stream;
    return collective(comm, count * type_size(datatype));
}
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) ALIAS(ncclRecv);

API ncclResult_t pncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupStart(void) ALIAS(ncclGroupStart);
API ncclResult_t pncclGroupEnd(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) ALIAS(ncclGroupEnd);
