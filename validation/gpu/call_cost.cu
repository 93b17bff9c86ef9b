// The cost of one traced CUDA call, per kind (issue 34), on the real driver. One process runs
// each kind of call in a tight loop for a set time when told, so that untraced, bare-probe and
// gputrace phases alternate in the same process (call_cost.sh drives it).
// Build: nvcc -O2 -o call_cost call_cost.cu
// Protocol: prints "ready PID"; each stdin line "measure KIND SECONDS" runs KIND and prints
// "KIND NS_PER_CALL CALLS CPU_NS_PER_CALL" (wall time, and the thread's own CPU time: a trap
// is CPU time of the thread that hits it, while a guest's stolen time is not, so the second
// is steadier on a VM); "quit" ends. Kinds:
//   launch     an empty kernel <<<1,1>>>; a stream sync every 256 launches keeps the queue
//              from filling, and is not timed: the figure is the launch calls' own time, so
//              that a GPU slower than the host does not hide what the host pays
//   item       what `.item()` does: a 4-byte cudaMemcpyAsync device-to-host into pageable
//              memory, then cudaStreamSynchronize (the queue is empty: no GPU wait)
//   d2h        one synchronous 4-byte cudaMemcpy device-to-host into pageable memory
//   h2d        one synchronous 4 KiB cudaMemcpy host-to-device from pageable memory
//   sync       cudaStreamSynchronize on an idle stream
//   event      cudaEventRecord + cudaEventSynchronize on an idle stream
//   alloc      cudaMalloc 1 MiB + cudaFree
// With CALL_COST_SLICE_MS=N in the environment, each measurement also writes to stderr a line
// "slice MEASUREMENT MONOTONIC_NS NS_PER_CALL" every N ms: where in a phase the cost lies
// (the budget's on and off phases, an attach's start-up), to lay beside gputrace -v's log.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

__global__ void empty_kernel() {}

struct Buffers {
    float *device_word = nullptr;
    char *device_page = nullptr;
    char host_page[4096];
    float host_word = 0;
    cudaStream_t stream = nullptr;
    cudaEvent_t event = nullptr;
};

// Time spent in calls that are not the measured kind (launch's syncs), in ns: wall, CPU.
static double untimed_ns = 0;
static double untimed_cpu_ns = 0;

// The calling thread's CPU time, in ns.
static double thread_cpu_ns() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

// One call of KIND; returns how many calls it made (launch makes 256 per round).
static long one_round(const std::string &kind, Buffers &b) {
    if (kind == "launch") {
        for (int i = 0; i < 256; i++) empty_kernel<<<1, 1, 0, b.stream>>>();
        auto before = std::chrono::steady_clock::now();
        double cpu_before = thread_cpu_ns();
        CHECK(cudaStreamSynchronize(b.stream));
        untimed_cpu_ns += thread_cpu_ns() - cpu_before;
        untimed_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - before).count();
        return 256;
    }
    if (kind == "item") {
        CHECK(cudaMemcpyAsync(&b.host_word, b.device_word, 4, cudaMemcpyDeviceToHost, b.stream));
        CHECK(cudaStreamSynchronize(b.stream));
    } else if (kind == "d2h") {
        CHECK(cudaMemcpy(&b.host_word, b.device_word, 4, cudaMemcpyDeviceToHost));
    } else if (kind == "h2d") {
        CHECK(cudaMemcpy(b.device_page, b.host_page, sizeof b.host_page, cudaMemcpyHostToDevice));
    } else if (kind == "sync") {
        CHECK(cudaStreamSynchronize(b.stream));
    } else if (kind == "event") {
        CHECK(cudaEventRecord(b.event, b.stream));
        CHECK(cudaEventSynchronize(b.event));
    } else if (kind == "alloc") {
        void *p = nullptr;
        CHECK(cudaMalloc(&p, 1 << 20));
        CHECK(cudaFree(p));
    } else {
        return -1;
    }
    return 1;
}

int main() {
    Buffers b;
    CHECK(cudaMalloc(&b.device_word, sizeof(float)));
    CHECK(cudaMalloc(&b.device_page, sizeof b.host_page));
    CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&b.event, cudaEventDisableTiming));
    std::memset(b.host_page, 1, sizeof b.host_page);
    for (const char *k : {"launch", "item", "d2h", "h2d", "sync", "event", "alloc"})
        for (int i = 0; i < 200; i++) one_round(k, b);  // warm every path once
    std::printf("ready %d\n", getpid());
    std::fflush(stdout);
    char line[256];
    const char *slice_env = std::getenv("CALL_COST_SLICE_MS");
    const double slice_ms = slice_env ? std::atof(slice_env) : 0.0;
    int measurement = 0;
    while (std::fgets(line, sizeof line, stdin)) {
        char verb[32], kind[32];
        double seconds = 0;
        if (std::sscanf(line, "%31s %31s %lf", verb, kind, &seconds) != 3 || std::strcmp(verb, "measure") != 0) break;
        long calls = 0;
        untimed_ns = 0;
        untimed_cpu_ns = 0;
        double cpu_start = thread_cpu_ns();
        auto start = std::chrono::steady_clock::now();
        auto until = start + std::chrono::duration<double>(seconds);
        auto slice_start = start;
        long slice_calls = 0;
        double slice_untimed = untimed_ns;
        while (std::chrono::steady_clock::now() < until) {
            long n = one_round(kind, b);
            if (n < 0) { std::printf("%s unknown 0\n", kind); break; }
            calls += n;
            slice_calls += n;
            if (slice_ms > 0) {
                auto now = std::chrono::steady_clock::now();
                double spent = std::chrono::duration<double, std::milli>(now - slice_start).count();
                if (spent >= slice_ms) {
                    timespec mono{};
                    clock_gettime(CLOCK_MONOTONIC, &mono);
                    double per = (spent * 1e6 - (untimed_ns - slice_untimed)) / double(slice_calls);
                    std::fprintf(stderr, "slice %d %lld %.1f\n", measurement, (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec, per);
                    slice_start = now;
                    slice_calls = 0;
                    slice_untimed = untimed_ns;
                }
            }
        }
        measurement++;
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() - untimed_ns;
        double cpu = thread_cpu_ns() - cpu_start - untimed_cpu_ns;
        std::printf("%s %.1f %ld %.1f\n", kind, calls ? ns / calls : 0.0, calls, calls ? cpu / calls : 0.0);
        std::fflush(stdout);
    }
    return 0;
}
