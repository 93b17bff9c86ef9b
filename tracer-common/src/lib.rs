//! Wire types shared by the kernel programs (`tracer-ebpf`) and user space (`tracer`).
//!
//! Everything here is `#[repr(C)]`, has no `bool` and no implicit padding, and has its size
//! pinned by a `const` assertion, so both sides read the same bytes. Event kinds and probe
//! ids are stable numbers: a recording written by one version is read by the next.
#![no_std]
#![deny(missing_docs)]

pub mod cuda;
pub mod event;
pub mod host;
pub mod nccl;
pub mod probe;
pub mod python;

pub use event::*;
pub use host::{CallSite, CallStack, IoKey, IoStart, Layout, OffCpuStart, SampleKey, SampleStats, ThreadSched, TrapSamples, WakeKey, WakeStats};
pub use probe::*;
pub use python::{PyFrameRef, PyFramesEvent, PyLayout, PyThreadKey};

/// Capacity of the per-thread counter map. A thread's entry is folded into user-space totals
/// and deleted when the thread exits, so this bounds live threads, not threads ever seen.
pub const MAX_THREADS: u32 = 16_384;
/// Capacity of the traced-process set.
pub const MAX_PROCESSES: u32 = 8_192;
/// Capacity of the in-flight block request table.
pub const MAX_INFLIGHT: u32 = 16_384;
/// Ring buffer size in bytes (a power of two, as the kernel requires).
pub const RING_BYTES: u32 = 4 << 20;

/// Indexes into the kernel's `LOSS` per-CPU array: each place where the kernel side can lose
/// something counts it, so the report can say exactly what is missing.
pub mod loss {
    /// `bpf_ringbuf_reserve` failed: the ring buffer was full, an event was dropped.
    pub const RING_FULL: u32 = 0;
    /// A thread could not get a counter slot (the thread map was full): its hits are lost.
    pub const THREAD_MAP_FULL: u32 = 1;
    /// A call's entry could not be remembered (its thread was inside more probed calls than
    /// it has slots for, or had no counters), so its return produced no event.
    pub const INFLIGHT_FULL: u32 = 2;
    /// A return probe fired without a matching entry (attached mid-call, or evicted).
    pub const UNMATCHED_RETURN: u32 = 3;
    /// A traced child process could not be added to the traced set.
    pub const PROCESS_MAP_FULL: u32 = 4;
    /// A thread's scheduler accounting could not be kept (the map was full).
    pub const SCHED_MAP_FULL: u32 = 5;
    /// A block request of the traced tree could not be remembered until completion.
    pub const IO_MAP_FULL: u32 = 6;
    /// Of the `RING_FULL` drops, those of CUDA call records (so that delivered + dropped can
    /// be checked against the per-probe hit counts, which only calls have).
    pub const RING_FULL_CALLS: u32 = 7;
    /// A kind of wakeup of a traced thread could not be counted (the `WAKES` map was full):
    /// its off-CPU time is not split by waker.
    pub const WAKE_MAP_FULL: u32 = 8;
    /// A stack sample or off-CPU spell could not be counted (the `SAMPLES` map was full):
    /// the call sites (`diagnoses[].sites`) are partial.
    pub const SAMPLE_MAP_FULL: u32 = 9;
    /// A user stack could not be copied for unwinding (the ring buffer was full): its frame
    /// pointer stack stands in for it.
    pub const STACK_COPY_FAILED: u32 = 10;
    /// Number of loss counters: the length of `LOSS`.
    pub const COUNT: u32 = 11;
}

/// Calls a thread can be inside at once and still have each timed: a probed call that calls
/// another probed entry point, as the driver's own entry points sometimes do.
pub const INFLIGHT_SLOTS: usize = 2;

/// One call between its entry and its return, in its thread's counters (probe 0: free).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InflightSlot {
    /// The call's probe id; 0: the slot is free.
    pub probe: u32,
    /// The call epoch the call was entered in (`call_epoch`), or [`call_epoch::NEVER`] for
    /// a probe the overhead budget never takes off.
    pub epoch: u32,
    /// Its entry time and saved arguments.
    pub call: InflightCall,
}

impl InflightSlot {
    /// Whether this slot holds a call still in flight in epoch `current`: a slot of an
    /// earlier epoch held a call whose probes the overhead budget took off, so its return
    /// was never seen.
    #[must_use]
    pub const fn live(&self, current: u32) -> bool {
        self.probe != 0 && (self.epoch == call_epoch::NEVER || self.epoch == current)
    }
}

/// The call epoch: a number user space writes to the kernel's `CALL_EPOCH` map and moves on
/// each time the overhead budget takes the copy, memset and sync probes off and each time
/// it puts them back (`Shed::LaunchesAndCalls`). A call of those probes takes its slot in
/// the epoch it entered in; a slot of another epoch is free, its call's return having gone
/// unprobed. While they are off (`OFF` set), no entry of theirs takes a slot: the kernel
/// fires a closed link's probes for a grace period after, and nothing says which call a
/// thread is in then.
pub mod call_epoch {
    /// Set while the calls are off.
    pub const OFF: u32 = 1 << 31;
    /// The epoch of a slot whose probe is never taken off.
    pub const NEVER: u32 = u32::MAX;

    /// The epoch after `current`: the calls going off (`off`) or coming back. The number
    /// wraps below `OFF`, so the epoch is never [`NEVER`], even with `OFF` set.
    #[must_use]
    pub const fn next(current: u32, off: bool) -> u32 {
        const WRAP: u32 = OFF - 1;
        let number = ((current & !OFF) + 1) % WRAP;
        if off {
            number | OFF
        } else {
            number
        }
    }
}
const _: () = assert!(core::mem::size_of::<InflightSlot>() == 8 + core::mem::size_of::<InflightCall>());

/// Per-thread state kept in the kernel: one hit count per probe, the state the launch probe
/// needs to notice the first launch after the GPU queue was drained, and what a call's
/// entry leaves for its return and for the stacks taken inside it. One entry a thread, so a
/// probed call pays one map lookup at its entry and one at its return, where separate maps
/// cost it four more (an LRU insert, lookup and delete for the call, an insert each for its
/// stack and return address: docs/benchmarks.md).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ThreadCounters {
    /// Process (thread group) the thread belongs to.
    pub tgid: u32,
    /// Explicit padding, always 0.
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u16,
    /// The probe id of the call entered last: which call the thread is in while
    /// [`Self::in_call`] (the stack sampler tags its samples with it).
    pub call_probe: u16,
    /// Monotonic time a queue-draining call (synchronize, synchronous D→H copy) returned;
    /// 0 when a launch has happened since.
    pub drained_at_ns: u64,
    /// Monotonic time of the thread's latest kernel launch or graph replay (0: none yet): the
    /// CPU sampler's `launch_age`.
    pub last_launch_ns: u64,
    /// The calls the thread is inside, for their returns.
    pub inflight: [InflightSlot; INFLIGHT_SLOTS],
    /// The stack the thread entered its latest sync or device-to-host copy with.
    pub call_stack: CallStack,
    /// Where its latest probed calls' return addresses are (stacks copied inside them).
    pub returns: ReturnAddrs,
    /// Hits per probe id.
    pub hits: [u64; probe::PROBE_SLOTS],
}
const _: () = assert!(
    core::mem::size_of::<ThreadCounters>()
        == 24 + INFLIGHT_SLOTS * core::mem::size_of::<InflightSlot>() + core::mem::size_of::<CallStack>() + core::mem::size_of::<ReturnAddrs>() + 8 * probe::PROBE_SLOTS
);

impl ThreadCounters {
    /// A thread's counters before anything happened (the struct is too large for `Default`).
    pub const ZERO: Self = Self {
        tgid: 0,
        _reserved: 0,
        call_probe: 0,
        drained_at_ns: 0,
        last_launch_ns: 0,
        inflight: [InflightSlot { probe: 0, epoch: 0, call: InflightCall { start_ns: 0, args: [0; CALL_ARGS] } }; INFLIGHT_SLOTS],
        call_stack: CallStack { stack_id: 0, probe: 0, _reserved: 0, taken_ns: 0 },
        returns: ReturnAddrs { slots: [0; 2], values: [0; 2] },
        hits: [0; probe::PROBE_SLOTS],
    };

    /// Whether the thread is inside a probed call (a slot live in call epoch `epoch`, not
    /// yet freed by its return): while it waits inside a copy or synchronize. False in
    /// entry-only mode, where no return would free a slot, so no entry takes one.
    #[must_use]
    pub const fn in_call(&self, epoch: u32) -> bool {
        self.inflight[0].live(epoch) || self.inflight[1].live(epoch)
    }
}

/// What the kernel remembers between a call's entry and its return. `args` are the raw
/// integer arguments, except for 2D/3D copies, whose entry stores the fields it read from
/// their parameter struct ([`cuda::slot`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InflightCall {
    /// Entry time (`bpf_ktime_get_ns`, monotonic ns).
    pub start_ns: u64,
    /// The saved arguments: the raw ones, or as `cuda::slot` and `nccl::slot` lay them out.
    pub args: [u64; CALL_ARGS],
}
const _: () = assert!(core::mem::size_of::<InflightCall>() == 8 + 8 * CALL_ARGS);

/// Load-time settings written into the eBPF object's globals before it is loaded.
pub mod globals {
    /// Nonzero: the CUDA probes count every process, not only the traced set (`sweep`).
    pub const TRACE_ALL_CUDA: &str = "TRACE_ALL_CUDA";
    /// Nonzero: take the traced threads' user stacks (CPU samples and off-CPU spells).
    pub const SAMPLE_STACKS: &str = "SAMPLE_STACKS";
    /// Nonzero: every copy record wakes the reader (the behaviour before first-sight
    /// delivery; `GPUTRACE_PROMPT_EVERY_COPY=1`, for the per-call cost benchmark's A/B).
    pub const PROMPT_EVERY_COPY: &str = "PROMPT_EVERY_COPY";
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain `#[repr(C)]` integers with no padding (sizes asserted above).
    unsafe impl aya::Pod for super::ThreadCounters {}
    // SAFETY: as above.
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadSched {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Layout {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::WakeKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::WakeStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SampleKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SampleStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TrapSamples {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OffCpuStart {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ReturnAddrs {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CallStack {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CallSite {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PyLayout {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PyThreadKey {}
}

#[cfg(test)]
mod tests {
    use super::{call_epoch, InflightCall, InflightSlot, ThreadCounters};

    fn slot(probe: u32, epoch: u32) -> InflightSlot {
        InflightSlot { probe, epoch, call: InflightCall::default() }
    }

    #[test]
    fn a_call_is_in_flight_only_in_the_epoch_it_entered_in() {
        let entered = 7;
        let s = slot(21, entered);
        assert!(s.live(entered));
        // The calls went off and came back: its return went unprobed, its slot is free.
        let off = call_epoch::next(entered, true);
        let back = call_epoch::next(off, false);
        assert!(!s.live(off) && !s.live(back));
        assert_ne!(back, entered);
        // A free slot is never live; a probe never taken off is live in every epoch.
        assert!(!slot(0, entered).live(entered));
        assert!(slot(40, call_epoch::NEVER).live(off) && slot(40, call_epoch::NEVER).live(back));
    }

    #[test]
    fn the_epoch_wraps_below_off_and_is_never_never() {
        assert_eq!(call_epoch::next(0, false), 1);
        assert_eq!(call_epoch::next(1, true), 2 | call_epoch::OFF);
        assert_eq!(call_epoch::next(2 | call_epoch::OFF, false), 3);
        let last = call_epoch::OFF - 2;
        assert_eq!(call_epoch::next(last, false), 0, "wraps");
        assert_ne!(call_epoch::next(last - 1, true), call_epoch::NEVER);
        assert_ne!(call_epoch::next(call_epoch::NEVER, true), call_epoch::NEVER);
    }

    #[test]
    fn a_thread_is_in_a_call_while_either_slot_is_live() {
        let mut t = ThreadCounters::ZERO;
        assert!(!t.in_call(3));
        t.inflight[1] = slot(21, 3);
        assert!(t.in_call(3) && !t.in_call(call_epoch::next(3, true)));
    }
}
