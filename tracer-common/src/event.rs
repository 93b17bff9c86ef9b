//! Records the kernel writes to the ring buffer. Every record starts with [`EventHeader`];
//! `kind` says which struct follows. Kinds are stable, gapped numbers.

use crate::{host::ThreadSched, probe::CALL_ARGS};

/// A probed CUDA call returned ([`CallEvent`]).
pub const KIND_CALL: u32 = 10;
/// A thread launched work after its queue had been drained ([`IdleEndEvent`]).
pub const KIND_IDLE_END: u32 = 20;
/// A traced process created a task, thread or process ([`TaskEvent`]).
pub const KIND_TASK_NEW: u32 = 30;
/// A traced task exited ([`TaskEvent`]).
pub const KIND_TASK_EXIT: u32 = 31;
/// A traced task called exec ([`TaskEvent`]).
pub const KIND_TASK_EXEC: u32 = 32;

/// A traced thread's final scheduler accounting, at its last switch-out ([`SchedFinalEvent`]).
pub const KIND_SCHED_FINAL: u32 = 40;
/// A traced thread woke from a long off-CPU spell ([`LongSleepEvent`]).
pub const KIND_LONG_SLEEP: u32 = 41;
/// A block request of the traced tree completed ([`IoEvent`]).
pub const KIND_IO: u32 = 50;
/// A traced thread's user registers and the top of its user stack, for user space to unwind
/// with the call frame information ([`UserStackEvent`]). Consumed live, never recorded.
pub const KIND_USER_STACK: u32 = 60;
/// A thread's Python frames, read in a caching allocator's probe as it handed out a block
/// ([`crate::PyFramesEvent`]). Consumed live, never recorded.
pub const KIND_PY_FRAMES: u32 = 61;

/// `clone_flags` bit that marks a new thread rather than a new process (linux/sched.h).
pub const CLONE_THREAD: u64 = 0x0001_0000;

/// The start of every record: which struct follows, and which thread it is about.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// One of the `KIND_*` constants.
    pub kind: u32,
    /// Probe id for call events, 0 otherwise.
    pub probe: u32,
    /// Process (thread group) of the thread the record is about.
    pub tgid: u32,
    /// The thread the record is about: the caller, the woken thread, the submitter of a block
    /// request.
    pub tid: u32,
    /// `bpf_ktime_get_ns` (`CLOCK_MONOTONIC`) when the record was written.
    pub ts_ns: u64,
}
const _: () = assert!(core::mem::size_of::<EventHeader>() == 24);

/// A probed call, written at its return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallEvent {
    /// `KIND_CALL`, with the call's probe id.
    pub header: EventHeader,
    /// Entry time; `header.ts_ns` is the return time.
    pub start_ns: u64,
    /// Raw integer arguments at entry.
    pub args: [u64; CALL_ARGS],
    /// Return value (a `CUresult`, 0 on success).
    pub ret: u64,
    /// The value the out-pointer argument pointed to after the call (an allocation's address),
    /// 0 where the probe has none or it could not be read.
    pub out: u64,
}
const _: () = assert!(core::mem::size_of::<CallEvent>() == 24 + 8 + 8 * CALL_ARGS + 16);

/// The first launch on a thread after one of its calls drained the device queue. Between the
/// two, that queue was empty: a lower bound on GPU idle time that needs no GPU timestamps.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleEndEvent {
    /// `KIND_IDLE_END`, with the launch's probe id; `ts_ns` is the launch.
    pub header: EventHeader,
    /// When the draining call returned (monotonic ns): the queue was empty from then to
    /// `header.ts_ns`.
    pub drained_at_ns: u64,
}
const _: () = assert!(core::mem::size_of::<IdleEndEvent>() == 32);

/// Process-tree bookkeeping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskEvent {
    /// `KIND_TASK_NEW`, `KIND_TASK_EXIT` or `KIND_TASK_EXEC`, for the task that created, exited or
    /// exec'd.
    pub header: EventHeader,
    /// New task's id (`KIND_TASK_NEW`), 0 otherwise.
    pub child_tid: u32,
    /// Explicit padding, always 0.
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a wire struct; public so both sides can build it with a literal"
    )]
    pub _reserved: u32,
    /// `clone_flags` (`KIND_TASK_NEW`), 0 otherwise.
    pub flags: u64,
}
const _: () = assert!(core::mem::size_of::<TaskEvent>() == 40);

/// A thread's scheduler accounting as it died (its map entry is deleted then).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedFinalEvent {
    /// `KIND_SCHED_FINAL`, for the dying thread.
    pub header: EventHeader,
    /// Its totals, as they were in `SCHED`.
    pub sched: ThreadSched,
}
const _: () = assert!(core::mem::size_of::<SchedFinalEvent>() == 24 + 64);

/// An off-CPU spell of at least [`crate::host::LONG_SLEEP_NS`], written when the thread was
/// woken (`header.ts_ns`); `header.tid` is the woken thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LongSleepEvent {
    /// `KIND_LONG_SLEEP`.
    pub header: EventHeader,
    /// When the spell began: the switch out (monotonic ns).
    pub start_ns: u64,
    /// The wakeup, as counted in the `WAKES` map.
    pub wake: crate::host::WakeKey,
    /// 1 for an uninterruptible (`D`) spell.
    pub blocked: u32,
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<LongSleepEvent>() == 24 + 8 + 24 + 8);

/// A completed block request, attributed to the thread that submitted it.
/// `header.ts_ns` is the completion time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoEvent {
    /// `KIND_IO`, for the thread that submitted the request.
    pub header: EventHeader,
    /// Submission time (monotonic ns).
    pub start_ns: u64,
    /// The request's device: `major << 20 | minor`, as the block tracepoints give it.
    pub dev: u32,
    /// Bytes the completion covered (the size at submission where it gave none).
    pub bytes: u32,
    /// First four characters of `rwbs`, little-endian.
    pub rwbs: u32,
    /// The block layer's status of the completion (`blk_status_t`): 0 is success.
    pub error: i32,
}
const _: () = assert!(core::mem::size_of::<IoEvent>() == 24 + 24);

/// Bytes of user stack a [`UserStackEvent`] can hold: the page the stack pointer is in (from it
/// up) and the next one, so 4–8 KiB. perf's `--call-graph dwarf` copies 8 KiB by default; a C
/// or C++ job's frames up to `main` fit in that, a deep Python interpreter's reach its frame
/// boundary (docs/architecture.md, "Native stacks").
pub const STACK_COPY_BYTES: usize = 8192;

/// Where a [`UserStackEvent`] was taken: what its `id` is counted under.
pub mod stack_source {
    /// The CPU sampler: one sample, counted by user space under the stack it unwinds to.
    pub const CPU: u16 = 1;
    /// A switch out to sleep or block: `id` is the off-CPU spell's `SampleKey::stack_id`.
    pub const OFF_CPU: u16 = 2;
    /// The entry of a device allocation: `id` is in the call's `slot::ALLOC_STACK`.
    pub const ALLOC: u16 = 3;
    /// The entry of a sync or a device-to-host copy (`takes_call_stack`): CPU samples and
    /// off-CPU spells inside the call count under `id` (`ThreadCounters::call_stack`).
    pub const CALL: u16 = 4;
}

/// Set on the stack ids that name a [`UserStackEvent`] (its `id`) rather than a stack of a
/// stack-trace map (ids below 2^32): bits 40..48 hold the CPU, bits 0..40 its count.
pub const COPIED_STACK_BIT: u64 = 1 << 62;

/// A traced thread's user registers where a stack is wanted (`source`), and what follows
/// them in a [`UserStackEvent`]: the top of its user stack, for user space to unwind with the
/// call frame information (`.eh_frame`, `.debug_frame`) when frame pointers are missing.
/// `fp_stack_id` is the frame-pointer stack taken at the same moment, the fallback.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserStackHead {
    /// `probe`: the CUDA call the thread was in, or `host::stacks::HOST`.
    pub header: EventHeader,
    /// [`COPIED_STACK_BIT`] | CPU << 40 | count: unique for the session.
    pub id: u64,
    /// The frame-pointer stack of the same moment (`USER_STACKS`, or `ALLOC_STACKS` for
    /// allocations); negative where it could not be taken.
    pub fp_stack_id: i64,
    /// The user instruction pointer, from the registers saved at the thread's entry into the
    /// kernel.
    pub ip: u64,
    /// The user stack pointer: where the copied bytes start.
    pub sp: u64,
    /// The user frame pointer (`rbp`).
    pub bp: u64,
    /// One of [`stack_source`].
    pub source: u16,
    /// For a CPU sample ([`stack_source::CPU`]), its `SampleKey::launch_age`; else
    /// `launch_age::UNKNOWN`. (The high half of a 32-bit `source` before: 0 in older
    /// recordings, which reads as unknown.)
    pub launch_age: u16,
    /// Bytes of the stack copied from `sp` up (0: none could be read).
    pub len: u32,
    /// The return addresses of the thread's latest probed calls, as they were before their
    /// return probes replaced them on the stack with the kernel's trampoline ([`ReturnAddrs`]).
    pub returns: ReturnAddrs,
}
const _: () = assert!(core::mem::size_of::<UserStackHead>() == 24 + 8 * 5 + 8 + 32);

/// Where the return addresses of a thread's two latest probed calls were on its stack, and
/// what they were: a return probe swaps each for the address of the kernel's trampoline
/// (`[uprobes]`) until the call returns, so a stack copied inside the call must have them put
/// back to be unwound past it. Kept per thread (`ThreadCounters::returns`); slot 0 is the latest
/// call's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReturnAddrs {
    /// Addresses of the stack words that held the return addresses (0: none).
    pub slots: [u64; 2],
    /// What those words held: the return addresses before the trampoline replaced them.
    pub values: [u64; 2],
}
const _: () = assert!(core::mem::size_of::<ReturnAddrs>() == 32);

/// [`UserStackHead`] and the stack bytes from `sp` up (`len` of them valid).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct UserStackEvent {
    /// The registers and where the stack was copied from.
    pub head: UserStackHead,
    /// The stack bytes from `head.sp` up; the first `head.len` are valid.
    pub stack: [u8; STACK_COPY_BYTES],
}
const _: () = assert!(core::mem::size_of::<UserStackEvent>() == core::mem::size_of::<UserStackHead>() + STACK_COPY_BYTES);
