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

/// `clone_flags` bit that marks a new thread rather than a new process (linux/sched.h).
pub const CLONE_THREAD: u64 = 0x0001_0000;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub kind: u32,
    /// Probe id for call events, 0 otherwise.
    pub probe: u32,
    pub tgid: u32,
    pub tid: u32,
    /// `bpf_ktime_get_ns` (`CLOCK_MONOTONIC`) when the record was written.
    pub ts_ns: u64,
}
const _: () = assert!(core::mem::size_of::<EventHeader>() == 24);

/// A probed call, written at its return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallEvent {
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
    pub header: EventHeader,
    pub drained_at_ns: u64,
}
const _: () = assert!(core::mem::size_of::<IdleEndEvent>() == 32);

/// Process-tree bookkeeping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskEvent {
    pub header: EventHeader,
    /// New task's id (`KIND_TASK_NEW`), 0 otherwise.
    pub child_tid: u32,
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
    pub header: EventHeader,
    pub sched: ThreadSched,
}
const _: () = assert!(core::mem::size_of::<SchedFinalEvent>() == 24 + 64);

/// An off-CPU spell of at least [`crate::host::LONG_SLEEP_NS`], written when the thread was
/// woken (`header.ts_ns`); `header.tid` is the woken thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LongSleepEvent {
    pub header: EventHeader,
    pub start_ns: u64,
    /// The wakeup, as counted in the `WAKES` map.
    pub wake: crate::host::WakeKey,
    /// 1 for an uninterruptible (`D`) spell.
    pub blocked: u32,
    #[expect(clippy::pub_underscore_fields, reason = "explicit padding: wire types have no implicit padding")]
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<LongSleepEvent>() == 24 + 8 + 24 + 8);

/// A completed block request, attributed to the thread that submitted it.
/// `header.ts_ns` is the completion time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoEvent {
    pub header: EventHeader,
    pub start_ns: u64,
    pub dev: u32,
    pub bytes: u32,
    /// First four characters of `rwbs`, little-endian.
    pub rwbs: u32,
    pub error: i32,
}
const _: () = assert!(core::mem::size_of::<IoEvent>() == 24 + 24);
