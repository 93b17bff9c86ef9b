//! Scheduler tracepoints: for each thread of the traced tree, how long it ran, waited for a
//! CPU, blocked (`D`) or slept (`S`). Runs on every context switch of the machine, so an
//! untraced switch costs a read of the next task's pid and two hash lookups. Raw tracepoints:
//! their arguments are the kernel's own (tasks, not a formatted record), and closing one does
//! not wait for an RCU grace period as a perf-event tracepoint's does (~40 ms each, issue 63).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::raw_tracepoint,
    programs::{tracing::StackIdContext as _, RawTracePointContext},
};
use gputrace_common::{
    host::{launch_age, prev_state, stacks::OFF_CPU_RETAKE_NS, state, LONG_SLEEP_NS},
    loss, stack_source, EventHeader, LongSleepEvent, OffCpuStart, SampleKey, SchedFinalEvent, ThreadSched, WakeKey, WakeStats, KIND_LONG_SLEEP,
    KIND_SCHED_FINAL,
};

use super::layout::{layout, member, task_pid};
use crate::{
    maps::{
        call_epoch, count_loss, count_sample, current_call, stacks_on, Current, BPF_F_USER_STACK, EVENTS, OFF_CPU, PREEMPTED_BY, SCHED, THREADS,
        TRACED, USER_STACKS, WAKES, WAKE_STACKS,
    },
    stack_copy::copy_user_stack,
};

/// Close the interval of the thread's current state at `now`.
#[inline(always)]
fn account(s: &mut ThreadSched, now: u64) {
    // `& 3` bounds the index where the verifier can see it (a match compiles to a table
    // lookup whose bound the verifier loses).
    s.spent_ns[(s.state & 3) as usize] += now.saturating_sub(s.since_ns);
    s.since_ns = now;
}

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next[, unsigned
/// int prev_state])`: the fourth argument from 5.18 on, the task's own state before.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> u32 {
    let l = layout();
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };

    let next = task_pid(&l, ctx.arg::<u64>(2));

    // The previous task is the current one.
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // SAFETY: presence test only.
    if tid != 0 && unsafe { TRACED.get(&tgid) }.is_some() {
        let prev_task = ctx.arg::<u64>(1);
        let raw_state = if l.switch_passes_state != 0 {
            ctx.arg::<u64>(3) & 0xffff_ffff
        } else if l.task_state_size == 8 {
            member::<u64>(prev_task, l.task_state).unwrap_or(0)
        } else {
            u64::from(member::<u32>(prev_task, l.task_state).unwrap_or(0))
        };
        let exit_state = u64::from(member::<u32>(prev_task, l.task_exit_state).unwrap_or(0));
        let prev = prev_state::from_raw(ctx.arg::<u64>(0) & 0xff != 0, raw_state, exit_state);
        switch_out(tgid, tid, prev, next, now);
        if stacks_on() && prev & prev_state::PREEMPTED == 0 && prev & (prev_state::EXIT_DEAD | prev_state::EXIT_ZOMBIE) == 0 && prev != 0 {
            // Going to sleep or to block: remember where, for the wakeup to charge the spell to.
            let (probe, call_stack) = current_call(tid);
            // Inside a sync or blocking copy: the stack the call was entered with, always
            // (a stack taken just before, in host code, says nothing about the wait).
            if let Some(stack_id) = call_stack {
                // Taken at 0: the next switch out of host code takes a stack of its own.
                let _ = OFF_CPU.insert(&tid, &OffCpuStart { stack_id, probe, _reserved: 0, taken_ns: 0 }, 0);
            } else {
                match OFF_CPU.get_ptr_mut(&tid) {
                    // SAFETY: map value pointer; only this thread's switches write it.
                    Some(o) if now.saturating_sub(unsafe { (*o).taken_ns }) < OFF_CPU_RETAKE_NS => unsafe { (*o).probe = probe },
                    _ => {
                        // SAFETY: the map is a stack-trace map; the current task is the one switching out.
                        let fp_stack_id = ctx.get_stackid(&USER_STACKS, BPF_F_USER_STACK).unwrap_or(-1);
                        // The spell is counted under the copy's id where there is one: user
                        // space knows the stack it unwinds to.
                        let cur = Current { tgid, tid };
                        let stack_id = copy_user_stack(&cur, stack_source::OFF_CPU, launch_age::UNKNOWN, probe, fp_stack_id).map_or(fp_stack_id, |id| id as i64);
                        let start = OffCpuStart { stack_id, probe, _reserved: 0, taken_ns: now };
                        let _ = OFF_CPU.insert(&tid, &start, 0);
                    }
                }
            }
        }
    }

    switch_in(next, now);
    0
}

/// The next task starts running: close its waiting interval.
#[inline(always)]
fn switch_in(next: u32, now: u64) {
    if let Some(s) = SCHED.get_ptr_mut(&next) {
        // SAFETY: map value pointer; the thread is switched in on this CPU only.
        let s = unsafe { &mut *s };
        account(s, now);
        s.state = state::RUNNING;
    }
}

#[inline(always)]
fn switch_out(tgid: u32, tid: u32, prev: u64, next: u32, now: u64) {
    let Some(ptr) = SCHED.get_ptr_mut(&tid) else {
        if prev & (prev_state::EXIT_DEAD | prev_state::EXIT_ZOMBIE) != 0 {
            return; // never seen alive (created before the probes, never switched): nothing to hand over
        }
        // First sight of this thread: start its clock; the time before is unknown.
        let fresh = ThreadSched { tgid, state: next_state(prev), since_ns: now, ..ThreadSched::default() };
        if SCHED.insert(&tid, &fresh, 0).is_err() {
            count_loss(loss::SCHED_MAP_FULL);
        }
        return;
    };
    // SAFETY: map value pointer; only the thread's own switches and wakeups write it.
    let s = unsafe { &mut *ptr };
    account(s, now);
    if prev & (prev_state::EXIT_DEAD | prev_state::EXIT_ZOMBIE) != 0 {
        // The thread's last switch: free the slot, then hand its totals over (in this order,
        // so that user space never sees them both in the map and in a record).
        let totals = *s;
        let _ = SCHED.remove(&tid);
        if let Some(mut entry) = EVENTS.reserve::<SchedFinalEvent>(0) {
            entry.write(SchedFinalEvent { header: EventHeader { kind: KIND_SCHED_FINAL, probe: 0, tgid, tid, ts_ns: now }, sched: totals });
            entry.submit(crate::maps::batched_submit());
        } else {
            count_loss(loss::RING_FULL);
        }
        return;
    }
    s.state = next_state(prev);
    if s.state == state::RUNNABLE {
        s.preemptions += 1;
        if let Some(n) = PREEMPTED_BY.get_ptr_mut(&next) {
            // SAFETY: map value pointer; a lost increment under a race only undercounts.
            unsafe { *n += 1 };
        } else {
            let _ = PREEMPTED_BY.insert(&next, &1, 0);
        }
    } else {
        s.voluntary_switches += 1;
    }
}

/// The state a task switched out with `prev_state` is in.
#[inline(always)]
fn next_state(prev: u64) -> u32 {
    if prev == 0 || prev & prev_state::PREEMPTED != 0 {
        state::RUNNABLE
    } else if prev & prev_state::TASK_UNINTERRUPTIBLE != 0 {
        state::BLOCKED
    } else {
        state::SLEEPING
    }
}

/// A sleeping or blocked traced thread became runnable: from now on it waits for a CPU.
#[inline(always)]
fn on_wakeup(ctx: &RawTracePointContext) -> u32 {
    // `sched_wakeup(struct task_struct *p)`, and `sched_wakeup_new` alike.
    let tid = task_pid(&layout(), ctx.arg::<u64>(0));
    let Some(ptr) = SCHED.get_ptr_mut(&tid) else { return 0 };
    // SAFETY: map value pointer of a thread that is not running.
    let s = unsafe { &mut *ptr };
    if s.state == state::BLOCKED || s.state == state::SLEEPING {
        // SAFETY: reading the monotonic clock has no preconditions.
        account(s, unsafe { bpf_ktime_get_ns() });
        s.state = state::RUNNABLE;
    }
    0
}

/// A sleeping or blocked traced thread is being woken, seen from the waker's side (the
/// task current here is the waker, or the task an interrupt interrupted; the kernel stack
/// tells which): close the off-CPU spell, and count it under who woke it and along which
/// kernel path. `sched_wakeup`, which follows, then finds the thread runnable already.
#[raw_tracepoint(tracepoint = "sched_waking")]
pub fn sched_waking(ctx: RawTracePointContext) -> u32 {
    // `sched_waking(struct task_struct *p)`.
    let tid = task_pid(&layout(), ctx.arg::<u64>(0));
    let Some(ptr) = SCHED.get_ptr_mut(&tid) else { return 0 };
    // SAFETY: map value pointer of a thread that is not running.
    let s = unsafe { &mut *ptr };
    if s.state != state::BLOCKED && s.state != state::SLEEPING {
        return 0;
    }
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let start = s.since_ns;
    let blocked = s.state == state::BLOCKED;
    account(s, now);
    s.state = state::RUNNABLE;
    let waker = bpf_get_current_pid_tgid();
    // SAFETY: the map is a stack-trace map; a failure (map full) leaves a negative id.
    let stack_id = ctx.get_stackid(&WAKE_STACKS, 0).unwrap_or(-1);
    // SAFETY: presence and a field read of the woken thread's counters.
    let in_cuda = unsafe { THREADS.get(&tid) }.is_some_and(|c| c.in_call(call_epoch()));
    let key = WakeKey { tid, waker_tgid: (waker >> 32) as u32, stack_id, in_cuda: u32::from(in_cuda), _reserved: 0 };
    let spell = now.saturating_sub(start);
    // SAFETY: a copy of the value is taken; the entry stays for the next spell.
    if let Some(off) = unsafe { OFF_CPU.get(&tid) }.copied() {
        let key = SampleKey { tgid: s.tgid, tid, stack_id: off.stack_id, probe: off.probe, off_cpu: 1, launch_age: launch_age::UNKNOWN };
        count_sample(&key, spell);
    }
    if let Some(w) = WAKES.get_ptr_mut(&key) {
        // SAFETY: map value pointer; a lost update under a race only undercounts.
        let w = unsafe { &mut *w };
        w.count += 1;
        w.ns += spell;
        if blocked {
            w.blocked_ns += spell;
        }
    } else {
        let first = WakeStats {
            count: 1,
            ns: spell,
            blocked_ns: if blocked { spell } else { 0 },
            waker_tid: waker as u32,
            _reserved: 0,
            waker_comm: bpf_get_current_comm().unwrap_or([0; 16]),
        };
        if WAKES.insert(&key, &first, 0).is_err() {
            count_loss(loss::WAKE_MAP_FULL);
        }
    }
    if spell >= LONG_SLEEP_NS {
        if let Some(mut entry) = EVENTS.reserve::<LongSleepEvent>(0) {
            let header = EventHeader { kind: KIND_LONG_SLEEP, probe: 0, tgid: s.tgid, tid, ts_ns: now };
            entry.write(LongSleepEvent { header, start_ns: start, wake: key, blocked: u32::from(blocked), _reserved: 0 });
            entry.submit(crate::maps::batched_submit());
        } else {
            count_loss(loss::RING_FULL);
        }
    }
    0
}

#[raw_tracepoint(tracepoint = "sched_wakeup")]
pub fn sched_wakeup(ctx: RawTracePointContext) -> u32 {
    on_wakeup(&ctx)
}

#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: RawTracePointContext) -> u32 {
    on_wakeup(&ctx)
}
