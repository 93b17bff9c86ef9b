//! The maps shared with user space, and the small helpers every probe uses on them.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf, StackTrace},
};
use gputrace_common::{
    host::stacks, loss, IoKey, IoStart, OffCpuStart, PyLayout, SampleKey, SampleStats, ThreadCounters, ThreadSched, TrapSamples, WakeKey,
    WakeStats, MAX_INFLIGHT, MAX_PROCESSES, MAX_THREADS, RING_BYTES,
};

/// Processes (thread-group ids) being traced. User space seeds it; the task tracepoints add
/// children of traced processes.
#[map]
pub static TRACED: HashMap<u32, u32> = HashMap::with_max_entries(MAX_PROCESSES, 0);

/// Per-thread counters, keyed by thread id.
#[map]
pub static THREADS: HashMap<u32, ThreadCounters> = HashMap::with_max_entries(MAX_THREADS, 0);

/// One all-zero `ThreadCounters`, the template for new entries: the struct is larger than the
/// 512-byte eBPF stack, so it cannot be built there.
#[map]
static ZERO_COUNTERS: Array<ThreadCounters> = Array::with_max_entries(1, 0);

/// Records for user space.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BYTES, 0);

/// Wake the reader only once this much is waiting. Waking it for every record cost more than
/// handling the record: at 50 k records/s the tracer spent ~5 µs of CPU per record, mostly in
/// wakeups (docs/benchmarks.md). User space also drains on its 200 ms tick, so a quiet ring
/// is never left unread for long; an eighth of the ring leaves room for bursts meanwhile.
const WAKEUP_BYTES: u64 = (RING_BYTES / 8) as u64;
/// `bpf_ringbuf_query` / `bpf_ringbuf_submit` flags (include/uapi/linux/bpf.h).
pub const BPF_RB_AVAIL_DATA: u64 = 0;
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
/// Submit flags that wake the reader whatever is queued before (flags 0 wake it only when the
/// ring was empty).
pub const FORCE_WAKEUP: u64 = BPF_RB_FORCE_WAKEUP;

/// Flags for submitting a record that can wait for the next batch.
#[inline(always)]
pub fn batched_submit() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// Nonzero (set by user space once it has decided, before any probe is attached): return
/// probes are off (`--entry-only`), so a call's entry takes no slot in its thread's counters,
/// which only a return frees: the thread would read as inside CUDA from its first call on.
#[map]
static ENTRY_ONLY: Array<u32> = Array::with_max_entries(1, 0);

/// Whether calls' returns are probed (see `ENTRY_ONLY`).
#[inline(always)]
pub fn returns_probed() -> bool {
    ENTRY_ONLY.get(0).is_none_or(|v| *v == 0)
}

/// The call epoch (`gputrace_common::call_epoch`), written by user space.
#[map]
static CALL_EPOCH: Array<u32> = Array::with_max_entries(1, 0);

/// The current call epoch (see `CALL_EPOCH`).
#[inline(always)]
pub fn call_epoch() -> u32 {
    CALL_EPOCH.get(0).map_or(0, |v| *v)
}

/// Loss counters, indexed by `gputrace_common::loss`.
#[map]
static LOSS: PerCpuArray<u64> = PerCpuArray::with_max_entries(loss::COUNT, 0);

pub struct Current {
    pub tgid: u32,
    pub tid: u32,
}

/// The calling thread, if its process is traced.
#[inline(always)]
pub fn traced_current() -> Option<Current> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is only tested for presence, never read through.
    unsafe { TRACED.get(&tgid) }?;
    Some(Current { tgid, tid: pid_tgid as u32 })
}

/// Set by user space before loading: nonzero makes the CUDA probes count every process that
/// calls into a probed library (`gputrace sweep`), not only those in `TRACED`. A load-time
/// global rather than a map, so `attach`/`run` pay one read-only load and no lookup for it.
/// Only the CUDA probes consult it: the task, scheduler and block tracepoints keep to
/// `TRACED`, so a host-wide sweep never starts per-thread scheduler accounting.
#[unsafe(no_mangle)]
static TRACE_ALL_CUDA: u32 = 0;

/// The calling thread, if its CUDA calls are to be counted: every process in a sweep,
/// otherwise only a traced one.
#[inline(always)]
pub fn cuda_caller() -> Option<Current> {
    // SAFETY: read_volatile keeps the compiler from folding the load-time constant.
    if unsafe { core::ptr::read_volatile(&TRACE_ALL_CUDA) } == 0 {
        return traced_current();
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    Some(Current { tgid: (pid_tgid >> 32) as u32, tid: pid_tgid as u32 })
}

/// Count one loss of the given kind.
#[inline(always)]
pub fn count_loss(kind: u32) {
    if let Some(slot) = LOSS.get_ptr_mut(kind) {
        // SAFETY: a per-CPU slot is only touched by this CPU, with preemption disabled.
        unsafe { *slot += 1 };
    }
}

/// The calling thread's counters, created on first use.
#[inline(always)]
pub fn thread_counters(cur: &Current) -> Option<*mut ThreadCounters> {
    if let Some(c) = THREADS.get_ptr_mut(&cur.tid) {
        return Some(c);
    }
    let zero = ZERO_COUNTERS.get(0)?;
    // BPF_NOEXIST: a racing insert for the same tid cannot happen (one thread runs on one CPU
    // at a time), but NOEXIST keeps an existing entry if it ever did.
    if THREADS.insert(&cur.tid, zero, 1).is_err() {
        count_loss(loss::THREAD_MAP_FULL);
        return None;
    }
    let c = THREADS.get_ptr_mut(&cur.tid)?;
    // SAFETY: the entry was just created and only this thread writes it.
    unsafe { (*c).tgid = cur.tgid };
    Some(c)
}

/// Per-thread scheduler accounting of traced threads, keyed by thread id.
#[map]
pub static SCHED: HashMap<u32, ThreadSched> = HashMap::with_max_entries(MAX_THREADS, 0);

/// Off-CPU time of traced threads by who woke them (`probes/sched.rs`, `sched_waking`).
#[map]
pub static WAKES: HashMap<WakeKey, WakeStats> = HashMap::with_max_entries(4096, 0);

/// The wakers' kernel stacks, by id (what woke the thread: a timer interrupt, a disk
/// completion, a pipe write, a futex wake …), symbolized by user space.
#[map]
pub static WAKE_STACKS: StackTrace = StackTrace::with_max_entries(1024, 0);

/// How often each thread id took the CPU from a traced thread that was still runnable.
#[map]
pub static PREEMPTED_BY: LruHashMap<u32, u64> = LruHashMap::with_max_entries(1024, 0);

/// Block requests of the traced tree between submission and completion.
#[map]
pub static IO_INFLIGHT: LruHashMap<IoKey, IoStart> = LruHashMap::with_max_entries(MAX_INFLIGHT, 0);

/// Set by user space before loading: nonzero takes user stacks of traced threads, on CPU
/// (`probes/sample.rs`) and as they go off it (`probes/sched.rs`). Off with `--no-stacks`.
#[unsafe(no_mangle)]
static SAMPLE_STACKS: u32 = 0;

/// Set by user space before loading: nonzero wakes the reader for every copy record, not
/// only for copies touching memory regions not seen before (`copy_region_is_new`).
#[unsafe(no_mangle)]
static PROMPT_EVERY_COPY: u32 = 0;

/// The 2 MiB regions (per process, both ends of a copy) whose copies have reached user space
/// promptly once; the value is unused. LRU: a job cycling through more regions than this
/// just wakes the reader more often.
#[map]
static COPY_REGIONS: LruHashMap<u64, u8> = LruHashMap::with_max_entries(4096, 0);

/// Whether a copy in process `tgid` touches 2 MiB regions not seen before (and remembers
/// them). `a`, `b`, `c`: the call's arguments 0, 1 and 3, which hold both ends' addresses
/// for every copy (plain: dst, src; 2D/3D: `slot::SRC_PTR`, `slot::DST_PTR`); the others
/// among them are constant per call site. A hash collision only delays one classification
/// to the next batch.
#[inline(always)]
pub fn copy_region_is_new(tgid: u32, a: u64, b: u64, c: u64) -> bool {
    // SAFETY: read_volatile keeps the compiler from folding the load-time constant.
    if unsafe { core::ptr::read_volatile(&PROMPT_EVERY_COPY) } != 0 {
        return true;
    }
    let key = (u64::from(tgid) << 40)
        ^ (a >> 21).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (b >> 21).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ (c >> 21).wrapping_mul(0x1656_67b1_9e37_79f9);
    // SAFETY: presence test only.
    if unsafe { COPY_REGIONS.get(&key) }.is_some() {
        return false;
    }
    let _ = COPY_REGIONS.insert(&key, &0, 0);
    true
}

/// Processes whose Python frames user space reads (`stacks::python`), with where their
/// interpreter's frames lie (`PyLayout`; `interp` 0 where its version has no layout). A
/// process with a layout has its blocks' frames read in the probe (`python_frames`); for the
/// others, an allocation's record is worth waking the reader at once, so that its line is read
/// while the thread is still on it. A wakeup costs the allocating thread ~14 µs on the 2-core
/// machine (docs/benchmarks.md), all of it wasted on a process with no Python to read.
#[map]
static PYTHON_READ: HashMap<u32, PyLayout> = HashMap::with_max_entries(MAX_PROCESSES, 0);

/// Whether user space reads process `tgid`'s Python frames.
#[inline(always)]
pub fn python_read(tgid: u32) -> bool {
    // SAFETY: the value is only tested for presence, never read through.
    unsafe { PYTHON_READ.get(&tgid) }.is_some()
}

/// Where process `tgid`'s Python frames lie, if user space reads them.
#[inline(always)]
pub fn python_layout(tgid: u32) -> Option<PyLayout> {
    // SAFETY: the value is copied out.
    unsafe { PYTHON_READ.get(&tgid) }.copied()
}

/// Whether stacks are taken (see `SAMPLE_STACKS`).
#[inline(always)]
pub fn stacks_on() -> bool {
    // SAFETY: read_volatile keeps the compiler from folding the load-time constant.
    unsafe { core::ptr::read_volatile(&SAMPLE_STACKS) != 0 }
}

/// The traced threads' user stacks, by id (symbolized by user space while the process lives).
#[map]
pub static USER_STACKS: StackTrace = StackTrace::with_max_entries(8192, 0);

/// The user stacks of device allocation calls, by id: a map of their own, because a stack
/// map refuses a stack whose hash bucket is taken (`-EEXIST`), and the thousands of sampled
/// stacks in `USER_STACKS` made an allocation's stack — often the one naming an OOM — miss
/// now and then. A job has few distinct allocation stacks, so collisions here are rare.
#[map]
pub static ALLOC_STACKS: StackTrace = StackTrace::with_max_entries(2048, 0);

/// CPU samples and off-CPU time of traced threads, by user stack and the CUDA call they were in.
#[map]
pub static SAMPLES: HashMap<SampleKey, SampleStats> = HashMap::with_max_entries(16_384, 0);

/// Each traced thread's CPU samples and those inside a trap (LRU: exited threads age out
/// only once the map is full, so a short-lived thread's samples are still there at the end).
#[map]
pub static TRAP_SAMPLES: LruHashMap<u32, TrapSamples> = LruHashMap::with_max_entries(MAX_THREADS, 0);

/// The stack a traced thread last went off the CPU with (LRU: exited threads age out).
#[map]
pub static OFF_CPU: LruHashMap<u32, OffCpuStart> = LruHashMap::with_max_entries(MAX_THREADS, 0);

/// `bpf_get_stackid` flag: the user-space stack (include/uapi/linux/bpf.h).
pub const BPF_F_USER_STACK: u64 = 1 << 8;

/// The probe id of the CUDA call the thread is inside (or `stacks::HOST`), and the stack it
/// entered that call with, if the call took one (`stack_copy::take_call_stack`).
#[inline(always)]
pub fn current_call(tid: u32) -> (u32, Option<i64>) {
    let (probe, stack, _) = current_call_and_launch(tid);
    (probe, stack)
}

/// As [`current_call`], with the time of the thread's latest launch (0: none yet).
#[inline(always)]
pub fn current_call_and_launch(tid: u32) -> (u32, Option<i64>, u64) {
    // SAFETY: field reads of the thread's counters.
    match unsafe { THREADS.get(&tid) } {
        Some(c) if c.in_call(call_epoch()) => {
            let probe = u32::from(c.call_probe);
            (probe, (c.call_stack.probe == probe).then_some(c.call_stack.stack_id), c.last_launch_ns)
        }
        Some(c) => (stacks::HOST, None, c.last_launch_ns),
        None => (stacks::HOST, None, 0),
    }
}

/// Add `count` and `ns` to a `SAMPLES` entry, creating it on first use.
#[inline(always)]
pub fn count_sample(key: &SampleKey, ns: u64) {
    if let Some(s) = SAMPLES.get_ptr_mut(key) {
        // SAFETY: map value pointer; a lost update under a race only undercounts.
        unsafe {
            (*s).count += 1;
            (*s).ns += ns;
        }
    } else if SAMPLES.insert(key, &SampleStats { count: 1, ns }, 0).is_err() {
        count_loss(loss::SAMPLE_MAP_FULL);
    }
}
