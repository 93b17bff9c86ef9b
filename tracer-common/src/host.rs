//! Host-side evidence: per-thread scheduler accounting and block I/O attribution.

/// Thread states as the scheduler tracepoints let us tell them apart. Each is also the index
/// of its time in [`ThreadSched::spent_ns`]; the kernel side indexes with `state & 3`, a bound
/// the verifier can see.
pub mod state {
    pub const RUNNING: u32 = 0;
    /// Runnable, waiting for a CPU (preempted, or woken and not yet running).
    pub const RUNNABLE: u32 = 1;
    /// Uninterruptible sleep (`D`): usually waiting for I/O.
    pub const BLOCKED: u32 = 2;
    /// Interruptible sleep (`S`) and anything else off-CPU by choice.
    pub const SLEEPING: u32 = 3;
    pub const COUNT: usize = 4;
}

/// `prev_state` bits in `sched:sched_switch` (include/linux/sched.h, and
/// `__trace_sched_switch_state`: a preempted task reports `TASK_REPORT_MAX`, 0x80 since 4.14;
/// a dying one its exit state).
pub mod prev_state {
    pub const TASK_UNINTERRUPTIBLE: u64 = 0x2;
    pub const EXIT_DEAD: u64 = 0x10;
    pub const EXIT_ZOMBIE: u64 = 0x20;
    pub const PREEMPTED: u64 = 0x80;
}

/// Per-thread scheduler accounting, kept in the kernel and folded by user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSched {
    pub tgid: u32,
    /// One of [`state`].
    pub state: u32,
    /// When `state` began (monotonic ns).
    pub since_ns: u64,
    /// Time spent in each [`state`].
    pub spent_ns: [u64; state::COUNT],
    /// Switches out while still runnable (involuntary) and by blocking or sleeping.
    pub preemptions: u64,
    pub voluntary_switches: u64,
}
const _: () = assert!(core::mem::size_of::<ThreadSched>() == 64);

/// One kind of wakeup of a traced thread, the key of the `WAKES` map: who woke it (the
/// task current at `sched_waking`, which in interrupt context is whatever task was
/// interrupted — hence the kernel stack, which shows the interrupt), along which kernel path,
/// and whether the thread was inside a CUDA call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakeKey {
    /// The thread that was woken.
    pub tid: u32,
    /// The waker's process (0: the idle task, an interrupt on an idle CPU).
    pub waker_tgid: u32,
    /// The waker's kernel stack in `WAKE_STACKS`; negative where it could not be taken.
    pub stack_id: i64,
    /// 1 when the woken thread was inside a probed CUDA call (a sync or copy waiting).
    pub in_cuda: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<WakeKey>() == 24);

/// What the wakeups of one [`WakeKey`] ended: off-CPU time and how often.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeStats {
    pub count: u64,
    /// Off-CPU time the wakeups ended (sleep or uninterruptible wait before each).
    pub ns: u64,
    /// Of `ns`, uninterruptible (`D`) time.
    pub blocked_ns: u64,
    /// The waker thread at the first such wakeup, and its command name then.
    pub waker_tid: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    pub waker_comm: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<WakeStats>() == 48);

/// Where a traced thread's time went, by user stack: the key of the `SAMPLES` map.
/// CPU samples (a perf event at [`stacks::SAMPLE_HZ`]) and off-CPU spells (from the switch
/// out to the wakeup) both count here, tagged with the CUDA call the thread was in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SampleKey {
    pub tgid: u32,
    pub tid: u32,
    /// The user stack in `USER_STACKS`; negative where it could not be taken.
    pub stack_id: i64,
    /// The probe id of the CUDA call the thread was inside, or [`stacks::HOST`].
    pub probe: u32,
    /// 1 for an off-CPU spell's key, 0 for CPU samples.
    pub off_cpu: u32,
}
const _: () = assert!(core::mem::size_of::<SampleKey>() == 24);

/// What one [`SampleKey`] collected.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleStats {
    /// CPU samples (on-CPU keys) or off-CPU spells (off-CPU keys).
    pub count: u64,
    /// Off-CPU time the spells lasted (0 for CPU samples).
    pub ns: u64,
}
const _: () = assert!(core::mem::size_of::<SampleStats>() == 16);

/// What the CPU sampler saw of one traced thread: how often it was on a CPU, and how often
/// inside a uprobe trap. The second over the first is the share of the thread's CPU time the
/// probes took, measured in the job itself rather than modelled (`tracer.overhead.sampled`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrapSamples {
    pub tgid: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    /// CPU samples that found the thread on a CPU.
    pub samples: u64,
    /// Of those, the ones inside a trap: an exception taken from user mode (a breakpoint or
    /// its single step) or the kernel's return-probe trampoline.
    pub in_trap: u64,
}
const _: () = assert!(core::mem::size_of::<TrapSamples>() == 24);

/// A traced thread's stack as it last went off the CPU: the wakeup charges the spell to it.
/// Taking a user stack costs microseconds, and a thread that syncs 100 k times a second
/// switches as often, so the stack is retaken at most every [`stacks::OFF_CPU_RETAKE_NS`];
/// switches in between reuse it (a loop goes off the CPU at the same few places).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuStart {
    pub stack_id: i64,
    pub probe: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    /// When `stack_id` was taken.
    pub taken_ns: u64,
}
const _: () = assert!(core::mem::size_of::<OffCpuStart>() == 24);

/// The stack a traced thread entered its latest sync or device-to-host copy with
/// (`probe::takes_call_stack`): while it is inside that call, its CPU samples and off-CPU
/// spells are counted under it, so that the wait is named at the caller's line whether or
/// not the driver's own frames can be unwound. Kept per thread (`ThreadCounters::call_stack`,
/// `probe` the call's) and per call site (`CALL_SITES`, `taken_ns` when copied): a site's stack is
/// retaken at most every [`stacks::OFF_CPU_RETAKE_NS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStack {
    pub stack_id: i64,
    pub probe: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    pub taken_ns: u64,
}
const _: () = assert!(core::mem::size_of::<CallStack>() == 24);

/// A call site of a thread: its stack pointer and return address at the call's entry (the
/// key of `CALL_SITES`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallSite {
    pub tid: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    pub sp: u64,
    pub ret: u64,
}
const _: () = assert!(core::mem::size_of::<CallSite>() == 24);

/// Stack sampling constants shared by both sides.
pub mod stacks {
    /// CPU samples per second and thread: 99, not 100, so as not to beat with 10 ms timers.
    pub const SAMPLE_HZ: u64 = 99;
    /// [`super::SampleKey::probe`] of a thread outside any probed call (host code).
    pub const HOST: u32 = u32::MAX;
    /// A thread's off-CPU stack is retaken at most this often (about the CPU sampler's rate).
    pub const OFF_CPU_RETAKE_NS: u64 = 10_000_000;
}

/// Off-CPU spells at least this long are also written as [`crate::event::LongSleepEvent`]s,
/// so that user space can place pauses in time.
pub const LONG_SLEEP_NS: u64 = 500_000_000;

/// A block request in flight, keyed by (device, sector).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoKey {
    pub dev: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    pub sector: u64,
}
const _: () = assert!(core::mem::size_of::<IoKey>() == 16);

/// Who submitted a block request, and when.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStart {
    pub tgid: u32,
    pub tid: u32,
    pub start_ns: u64,
    pub bytes: u32,
    /// First four characters of `rwbs` (`R`, `W`, `D`, `F` and modifiers).
    pub rwbs: u32,
}
const _: () = assert!(core::mem::size_of::<IoStart>() == 24);

/// Field offsets of the classic tracepoints we read, taken from tracefs at load time (they
/// change between kernels: `rwbs` grew from 8 to 10 bytes, `prev_state` changed type).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub switch_prev_pid: u32,
    pub switch_prev_state: u32,
    /// Size of `prev_state` in bytes (4 or 8).
    pub switch_prev_state_size: u32,
    pub switch_next_pid: u32,
    pub wakeup_pid: u32,
    /// `block_rq_issue`, `block_rq_insert` and `block_io_start` share a layout.
    pub rq_dev: u32,
    pub rq_sector: u32,
    pub rq_bytes: u32,
    pub rq_rwbs: u32,
    pub done_dev: u32,
    pub done_sector: u32,
    pub done_nr_sector: u32,
    pub done_error: u32,
}
const _: () = assert!(core::mem::size_of::<Layout>() == 52);

impl Layout {
    /// Offsets of Linux 6.18 (and most kernels since 5.x), used until tracefs says otherwise.
    pub const DEFAULT: Self = Self {
        switch_prev_pid: 24,
        switch_prev_state: 32,
        switch_prev_state_size: 8,
        switch_next_pid: 56,
        wakeup_pid: 24,
        rq_dev: 8,
        rq_sector: 16,
        rq_bytes: 28,
        rq_rwbs: 34,
        done_dev: 8,
        done_sector: 16,
        done_nr_sector: 24,
        done_error: 28,
    };
}

/// Name of the global that holds the [`Layout`].
pub const LAYOUT_GLOBAL: &str = "LAYOUT";
