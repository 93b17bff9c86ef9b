//! Task tracepoints: keep `TRACED` equal to the traced process tree and tell user space when
//! tasks appear, exec and exit. Raw tracepoints (not kprobes: our kernels have none); the new
//! task's pid is read where the kernel's BTF places it in `task_struct`.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use gputrace_common::{
    host::state, loss, EventHeader, TaskEvent, ThreadSched, CLONE_THREAD, KIND_TASK_EXEC, KIND_TASK_EXIT, KIND_TASK_NEW,
};

use super::layout::{layout, task_pid};
use crate::maps::{count_loss, traced_current, Current, EVENTS, FORCE_WAKEUP, SCHED, TRACED};

/// `submit_flags`: `FORCE_WAKEUP` for what user space must act on at once (a new process or
/// image may map a CUDA library the probes do not cover yet), 0 for the rest.
#[inline(always)]
fn emit(kind: u32, cur: &Current, child_tid: u32, flags: u64, submit_flags: u64) {
    let Some(mut entry) = EVENTS.reserve::<TaskEvent>(0) else {
        count_loss(loss::RING_FULL);
        return;
    };
    entry.write(TaskEvent {
        // SAFETY: reading the monotonic clock has no preconditions.
        header: EventHeader { kind, probe: 0, tgid: cur.tgid, tid: cur.tid, ts_ns: unsafe { bpf_ktime_get_ns() } },
        child_tid,
        _reserved: 0,
        flags,
    });
    entry.submit(submit_flags);
}

/// Runs in the parent, inside `copy_process`, before the child can run: a child process of a
/// traced one is traced from its first instruction.
/// `task_newtask(struct task_struct *task, u64 clone_flags)`.
#[raw_tracepoint(tracepoint = "task_newtask")]
pub fn task_newtask(ctx: RawTracePointContext) -> u32 {
    let Some(cur) = traced_current() else { return 0 };
    let child = task_pid(&layout(), ctx.arg::<u64>(0));
    let flags = ctx.arg::<u64>(1);
    if child != 0 && flags & CLONE_THREAD == 0 && TRACED.insert(&child, &cur.tgid, 0).is_err() {
        count_loss(loss::PROCESS_MAP_FULL);
    }
    if child != 0 {
        // Start the new task's scheduler clock now: it is runnable from birth, and a thread that
        // runs until it exits would otherwise never be seen switching out.
        let tgid = if flags & CLONE_THREAD != 0 { cur.tgid } else { child };
        // SAFETY: reading the monotonic clock has no preconditions.
        let fresh = ThreadSched { tgid, state: state::RUNNABLE, since_ns: unsafe { bpf_ktime_get_ns() }, ..ThreadSched::default() };
        if SCHED.insert(&child, &fresh, 0).is_err() {
            count_loss(loss::SCHED_MAP_FULL);
        }
    }
    let wake = if flags & CLONE_THREAD == 0 { FORCE_WAKEUP } else { 0 };
    emit(KIND_TASK_NEW, &cur, child, flags, wake);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec(_ctx: RawTracePointContext) -> u32 {
    if let Some(cur) = traced_current() {
        emit(KIND_TASK_EXEC, &cur, 0, 0, FORCE_WAKEUP);
    }
    0
}

/// Runs in the exiting task. The process leaves `TRACED` when its last thread is gone,
/// which user space decides; here the event is only reported.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit(_ctx: RawTracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: presence test only.
    if unsafe { TRACED.get(&tgid) }.is_some() {
        emit(KIND_TASK_EXIT, &Current { tgid, tid: pid_tgid as u32 }, 0, 0, 0);
    }
    0
}
