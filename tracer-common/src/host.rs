//! Host-side evidence: per-thread scheduler accounting and block I/O attribution.

/// Thread states as the scheduler tracepoints let us tell them apart. Each is also the index
/// of its time in [`ThreadSched::spent_ns`]; the kernel side indexes with `state & 3`, a bound
/// the verifier can see.
pub mod state {
    /// On a CPU.
    pub const RUNNING: u32 = 0;
    /// Runnable, waiting for a CPU (preempted, or woken and not yet running).
    pub const RUNNABLE: u32 = 1;
    /// Uninterruptible sleep (`D`): usually waiting for I/O.
    pub const BLOCKED: u32 = 2;
    /// Interruptible sleep (`S`) and anything else off-CPU by choice.
    pub const SLEEPING: u32 = 3;
    /// Number of states: the length of `ThreadSched::spent_ns`.
    pub const COUNT: usize = 4;
}

/// How a task left the CPU, in `sched:sched_switch`'s own encoding of `prev_state`
/// (`__trace_sched_switch_state` in include/trace/events/sched.h): the highest reported state
/// bit, `IDLE` for `TASK_IDLE`, `PREEMPTED` for a task preempted while runnable, 0 for one that
/// yielded runnable. The raw tracepoint passes the task's raw state; `from_raw` encodes it.
pub mod prev_state {
    /// Interruptible sleep (`S`).
    pub const TASK_INTERRUPTIBLE: u64 = 0x1;
    /// Uninterruptible sleep (`D`).
    pub const TASK_UNINTERRUPTIBLE: u64 = 0x2;
    /// Dead, being reaped (`X`): the task's last switch.
    pub const EXIT_DEAD: u64 = 0x10;
    /// A zombie (`Z`): the task's last switch.
    pub const EXIT_ZOMBIE: u64 = 0x20;
    /// `TASK_REPORT_IDLE`: an uninterruptible wait that is not counted as load (`I`).
    pub const IDLE: u64 = 0x80;
    /// `TASK_REPORT_MAX`: preempted while runnable (`R+`; the tracepoint's format prints it so).
    pub const PREEMPTED: u64 = 0x100;
    /// The states the tracepoint reports (`TASK_REPORT`).
    const REPORT: u64 = 0x7f;
    /// `TASK_NOLOAD`, which with `TASK_UNINTERRUPTIBLE` makes `TASK_IDLE`.
    const NOLOAD: u64 = 0x400;
    /// `TASK_RTLOCK_WAIT`: a sleeping spinlock's wait, reported as uninterruptible.
    const RTLOCK_WAIT: u64 = 0x1000;

    /// The tracepoint's `prev_state` from the raw tracepoint's arguments: whether the switch
    /// was a preemption, the task's raw `__state`, and its `exit_state`.
    #[must_use]
    pub const fn from_raw(preempt: bool, state: u64, exit_state: u64) -> u64 {
        if preempt {
            return PREEMPTED;
        }
        let mut report = (state | exit_state) & REPORT;
        if state & (TASK_UNINTERRUPTIBLE | NOLOAD) == TASK_UNINTERRUPTIBLE | NOLOAD {
            report = IDLE;
        }
        if state & RTLOCK_WAIT != 0 {
            report = TASK_UNINTERRUPTIBLE;
        }
        // The highest bit, `1 << (fls(report) - 1)`, in a loop the eBPF verifier sees bounded.
        let mut bit = IDLE;
        while bit != 0 {
            if report & bit != 0 {
                return bit;
            }
            bit >>= 1;
        }
        0
    }
}

/// Per-thread scheduler accounting, kept in the kernel and folded by user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSched {
    /// Process the thread belongs to.
    pub tgid: u32,
    /// One of [`state`].
    pub state: u32,
    /// When `state` began (monotonic ns).
    pub since_ns: u64,
    /// Time spent in each [`state`].
    pub spent_ns: [u64; state::COUNT],
    /// Switches out while still runnable (involuntary) and by blocking or sleeping.
    pub preemptions: u64,
    /// Switches out to block or sleep.
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
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<WakeKey>() == 24);

/// What the wakeups of one [`WakeKey`] ended: off-CPU time and how often.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeStats {
    /// Wakeups of this kind.
    pub count: u64,
    /// Off-CPU time the wakeups ended (sleep or uninterruptible wait before each).
    pub ns: u64,
    /// Of `ns`, uninterruptible (`D`) time.
    pub blocked_ns: u64,
    /// The waker thread at the first such wakeup, and its command name then.
    pub waker_tid: u32,
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    /// The waker's command name (`comm`, NUL-padded) at that first wakeup.
    pub waker_comm: [u8; 16],
}
const _: () = assert!(core::mem::size_of::<WakeStats>() == 48);

/// Where a traced thread's time went, by user stack: the key of the `SAMPLES` map.
/// CPU samples (a perf event at [`stacks::SAMPLE_HZ`]) and off-CPU spells (from the switch
/// out to the wakeup) both count here, tagged with the CUDA call the thread was in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SampleKey {
    /// Process of the traced thread.
    pub tgid: u32,
    /// The traced thread.
    pub tid: u32,
    /// The user stack in `USER_STACKS`; negative where it could not be taken.
    pub stack_id: i64,
    /// The probe id of the CUDA call the thread was inside, or [`stacks::HOST`].
    pub probe: u32,
    /// 1 for an off-CPU spell's key, 0 for CPU samples.
    pub off_cpu: u16,
    /// For a CPU sample of host code: how long before it the thread last launched
    /// ([`launch_age`]); [`launch_age::UNKNOWN`] otherwise. (Its two bytes were the high half
    /// of a 32-bit `off_cpu`, always 0, before they said this.)
    pub launch_age: u16,
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
    /// Process the thread belongs to.
    pub tgid: u32,
    /// Explicit padding, always 0.
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
    /// The stack (a `USER_STACKS` id, or a copied stack's id); negative where it could not be
    /// taken.
    pub stack_id: i64,
    /// The probe id of the CUDA call the thread was in, or [`stacks::HOST`].
    pub probe: u32,
    /// Explicit padding, always 0.
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
    /// The stack (a `USER_STACKS` id, or a copied stack's id); negative where it could not be
    /// taken.
    pub stack_id: i64,
    /// The probe id of the call whose entry took it.
    pub probe: u32,
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    /// When the stack was taken (monotonic ns).
    pub taken_ns: u64,
}
const _: () = assert!(core::mem::size_of::<CallStack>() == 24);

/// A call site of a thread: its stack pointer and return address at the call's entry (the
/// key of `CALL_SITES`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallSite {
    /// The calling thread.
    pub tid: u32,
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    /// Its stack pointer at the call's entry.
    pub sp: u64,
    /// The call's return address.
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

/// How long before a CPU sample of host code its thread last launched a kernel or replayed a
/// graph, in classes twice apart: a sample in the launch stream (a framework's dispatch,
/// between launches microseconds apart) from one in host work that launches nothing for
/// milliseconds (data prepared through the framework's CPU kernels, bookkeeping), which the
/// native frames alone cannot tell apart (both run in `libtorch`). User space decides what is
/// apart, against each thread's own pace of launches.
pub mod launch_age {
    /// No launch seen from the thread yet, a sample inside a probed call or off the CPU, or a
    /// recording made before the classes existed (their bytes were 0).
    pub const UNKNOWN: u16 = 0;
    /// Classes there are; the last holds every age from its lower bound (~8.6 s) up.
    pub const CLASSES: u16 = 24;
    /// The "microsecond" of the classes: 1024 ns, a shift.
    const UNIT_SHIFT: u32 = 10;

    /// The class of an age of `age_ns`: class k (1..=[`CLASSES`]) holds ages from
    /// `2^(k-1)` units up to `2^k` (class 1 from 0). A loop the verifier sees bounded.
    #[must_use]
    pub const fn of(age_ns: u64) -> u16 {
        let mut units = age_ns >> UNIT_SHIFT;
        let mut class = 1;
        while units >= 2 && class < CLASSES {
            units >>= 1;
            class += 1;
        }
        class
    }

    /// The least age of class `class` in ns (0 for [`UNKNOWN`] and class 1).
    #[must_use]
    pub const fn lower_bound_ns(class: u16) -> u64 {
        if class <= 1 {
            0
        } else {
            1u64 << (UNIT_SHIFT + class as u32 - 1)
        }
    }

    /// The first age past class `class` in ns; `u64::MAX` for the last class.
    #[must_use]
    pub const fn upper_bound_ns(class: u16) -> u64 {
        if class >= CLASSES {
            u64::MAX
        } else {
            lower_bound_ns(class + 1)
        }
    }
}

/// Off-CPU spells at least this long are also written as [`crate::event::LongSleepEvent`]s,
/// so that user space can place pauses in time.
pub const LONG_SLEEP_NS: u64 = 500_000_000;

/// A block request in flight, keyed by (device, sector).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoKey {
    /// The request's device: `major << 20 | minor`, as the block tracepoints give it.
    pub dev: u32,
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
    /// Its first sector (0 for passthrough requests, as the tracepoints give them).
    pub sector: u64,
}
const _: () = assert!(core::mem::size_of::<IoKey>() == 16);

/// Who submitted a block request, and when.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStart {
    /// Process of the submitting thread.
    pub tgid: u32,
    /// The submitting thread.
    pub tid: u32,
    /// Submission time (monotonic ns).
    pub start_ns: u64,
    /// The request's size at submission (`__data_len`), in bytes.
    pub bytes: u32,
    /// First four characters of `rwbs` (`R`, `W`, `D`, `F` and modifiers).
    pub rwbs: u32,
}
const _: () = assert!(core::mem::size_of::<IoStart>() == 24);

/// Where the raw tracepoints' arguments keep what we read: byte offsets into kernel structures,
/// from the running kernel's BTF at load time (`tracer/src/probes/layout.rs`). They change
/// between kernels and configurations (`task_struct` is randomized on some), so none is
/// assumed; [`Layout::NONE`] marks a member this kernel does not have.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `task_struct.pid`.
    pub task_pid: u32,
    /// `task_struct.exit_state`.
    pub task_exit_state: u32,
    /// `task_struct.__state` (`state` before 5.14), read where `sched_switch` does not pass it.
    pub task_state: u32,
    /// Its size in bytes (4, or 8 for the `long state` of old kernels).
    pub task_state_size: u32,
    /// 1 where `sched_switch` passes `prev_state` as its fourth argument (5.18 and later).
    pub switch_passes_state: u32,
    /// `request.q`, then `request_queue.disk` (5.16 and later)...
    pub rq_q: u32,
    /// `request_queue.disk`.
    pub queue_disk: u32,
    /// ...or `request.rq_disk` (before): whichever this kernel has.
    pub rq_disk: u32,
    /// `gendisk.major` and `gendisk.first_minor`: the device, as the tracepoints' `dev`.
    pub disk_major: u32,
    /// `gendisk.first_minor`.
    pub disk_first_minor: u32,
    /// `request.__sector`, `request.__data_len` and `request.cmd_flags`.
    pub rq_sector: u32,
    /// `request.__data_len`.
    pub rq_data_len: u32,
    /// `request.cmd_flags`.
    pub rq_cmd_flags: u32,
}
const _: () = assert!(core::mem::size_of::<Layout>() == 52);

impl Layout {
    /// A member this kernel does not have.
    pub const NONE: u32 = u32::MAX;
    /// Nothing known: what the object holds until user space writes the kernel's layout.
    pub const UNKNOWN: Self = Self {
        task_pid: Self::NONE,
        task_exit_state: Self::NONE,
        task_state: Self::NONE,
        task_state_size: 4,
        switch_passes_state: 0,
        rq_q: Self::NONE,
        queue_disk: Self::NONE,
        rq_disk: Self::NONE,
        disk_major: Self::NONE,
        disk_first_minor: Self::NONE,
        rq_sector: Self::NONE,
        rq_data_len: Self::NONE,
        rq_cmd_flags: Self::NONE,
    };
}

/// A block request's operation (`REQ_OP_*`, the low byte of `cmd_flags`) as the first letter
/// of the tracepoints' `rwbs` string, the rest zero.
#[must_use]
pub fn rwbs_of_op(cmd_flags: u32) -> u32 {
    let letter = match cmd_flags & 0xff {
        0 => b'R',
        1 => b'W',
        2 => b'F',
        3 | 5 | 9 => b'D',
        _ => b'N',
    };
    u32::from(letter)
}

/// Name of the global that holds the [`Layout`].
pub const LAYOUT_GLOBAL: &str = "LAYOUT";

#[cfg(test)]
mod tests {
    use super::{prev_state, rwbs_of_op};

    #[test]
    fn raw_states_encode_as_the_tracepoint_prints_them() {
        use prev_state::{from_raw, EXIT_DEAD, EXIT_ZOMBIE, IDLE, PREEMPTED, TASK_INTERRUPTIBLE, TASK_UNINTERRUPTIBLE};
        // `R+`: preempted, whatever the state says.
        assert_eq!(from_raw(true, TASK_INTERRUPTIBLE, 0), PREEMPTED);
        // `R`: yielded while runnable.
        assert_eq!(from_raw(false, 0, 0), 0);
        assert_eq!(from_raw(false, TASK_INTERRUPTIBLE, 0), TASK_INTERRUPTIBLE);
        // TASK_KILLABLE = TASK_WAKEKILL | TASK_UNINTERRUPTIBLE: `D`.
        assert_eq!(from_raw(false, 0x100 | TASK_UNINTERRUPTIBLE, 0), TASK_UNINTERRUPTIBLE);
        // TASK_IDLE = TASK_UNINTERRUPTIBLE | TASK_NOLOAD: `I`, not `D`.
        assert_eq!(from_raw(false, 0x400 | TASK_UNINTERRUPTIBLE, 0), IDLE);
        // The last switch of a dying task: TASK_DEAD with its exit state.
        assert_eq!(from_raw(false, 0x80, EXIT_ZOMBIE), EXIT_ZOMBIE);
        assert_eq!(from_raw(false, 0x80, EXIT_DEAD), EXIT_DEAD);
        // A sleeping spinlock's wait reads uninterruptible.
        assert_eq!(from_raw(false, 0x1000, 0), TASK_UNINTERRUPTIBLE);
    }

    #[test]
    fn request_operations_read_as_their_rwbs_letter() {
        assert_eq!(rwbs_of_op(0), u32::from(b'R'));
        // REQ_SYNC and other flags above the op's byte do not change the op.
        assert_eq!(rwbs_of_op(1 | 1 << 11), u32::from(b'W'));
        assert_eq!(rwbs_of_op(3), u32::from(b'D'));
        assert_eq!(rwbs_of_op(34), u32::from(b'N'));
    }

    #[test]
    fn launch_ages_fall_in_classes_twice_apart_that_their_bounds_name() {
        use super::launch_age::{lower_bound_ns, of, upper_bound_ns, CLASSES};
        assert_eq!((of(0), of(1023), of(2047)), (1, 1, 1), "under two units");
        assert_eq!((of(2048), of(4095), of(4096)), (2, 2, 3));
        assert_eq!(of(u64::MAX), CLASSES, "the last class holds every age above it");
        for class in 2..=CLASSES {
            let lower = lower_bound_ns(class);
            assert_eq!((of(lower), of(lower - 1)), (class, class - 1), "class {class} begins at {lower} ns");
            assert_eq!(upper_bound_ns(class - 1), lower);
        }
        assert_eq!(lower_bound_ns(11), 1 << 20, "1024 units: ~1 ms");
        assert_eq!(upper_bound_ns(CLASSES), u64::MAX);
    }
}
