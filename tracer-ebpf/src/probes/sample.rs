//! The CPU sampler: a perf event fires on every CPU [`SAMPLE_HZ`] times a second; when it
//! interrupts a traced thread, its user stack is counted under the CUDA call the thread was
//! in (`SAMPLES`). User space turns the counts into time per call site.
//!
//! [`SAMPLE_HZ`]: gputrace_common::host::stacks::SAMPLE_HZ

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, generated::{bpf_get_current_task_btf, bpf_task_pt_regs}},
    macros::perf_event,
    programs::{tracing::StackIdContext as _, PerfEventContext},
    EbpfContext as _,
};
use gputrace_common::{
    host::{launch_age, stacks},
    stack_source, SampleKey, TrapSamples,
};

use crate::maps::{count_sample, current_call_and_launch, stacks_on, traced_current, Current, BPF_F_USER_STACK, TRAP_SAMPLES, USER_STACKS};
use crate::stack_copy::copy_user_stack;

#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    try_sample_cpu(&ctx);
    0
}

/// A sample whose stack could be copied is counted by user space once unwound; otherwise
/// (the ring full) here, under its frame-pointer stack.
#[inline(always)]
fn try_sample_cpu(ctx: &PerfEventContext) {
    let Some(cur) = traced_current() else { return };
    count_trap_sample(&cur, in_trap(ctx));
    if !stacks_on() {
        return;
    }
    let (probe, call_stack, last_launch_ns) = current_call_and_launch(cur.tid);
    // Inside a sync or blocking copy: the stack the call was entered with.
    if let Some(stack_id) = call_stack {
        count_sample(&SampleKey { tgid: cur.tgid, tid: cur.tid, stack_id, probe, off_cpu: 0, launch_age: launch_age::UNKNOWN }, 0);
        return;
    }
    let age = if probe == stacks::HOST && last_launch_ns != 0 {
        // SAFETY: reading the monotonic clock has no preconditions.
        launch_age::of(unsafe { bpf_ktime_get_ns() }.saturating_sub(last_launch_ns))
    } else {
        launch_age::UNKNOWN
    };
    // SAFETY: the map is a stack-trace map; a failure (map full, no user stack) gives -1.
    let stack_id = ctx.get_stackid(&USER_STACKS, BPF_F_USER_STACK).unwrap_or(-1);
    if copy_user_stack(&cur, stack_source::CPU, age, probe, stack_id).is_some() {
        return;
    }
    let key = SampleKey { tgid: cur.tgid, tid: cur.tid, stack_id, probe, off_cpu: 0, launch_age: age };
    count_sample(&key, 0);
}

/// x86-64 system calls the kernel's return-probe trampoline (`uretprobe`, Linux 6.11) and its
/// optimized probes (`uprobe`, Linux 6.18) enter by: a thread in either is in our trap.
const SYS_URETPROBE: u64 = 335;
const SYS_UPROBE: u64 = 336;

/// Whether the sample caught the thread inside a uprobe trap. A sample in user mode is not.
/// In the kernel, how the thread entered it tells: a system call leaves its number in the
/// saved user registers' `orig_ax`, a page fault its error code, and an exception without one
/// (the breakpoint a uprobe sets, the single step after it) leaves -1.
#[inline(always)]
fn in_trap(ctx: &PerfEventContext) -> bool {
    // A perf-event program's context, `bpf_perf_event_data`, begins with the interrupted
    // registers.
    let regs = ctx.as_ptr() as *const pt_regs;
    // SAFETY: the verifier lets the program read those registers from its context.
    let cs = unsafe { (*regs).cs };
    if cs & 3 == 3 {
        return false;
    }
    // SAFETY: both helpers take and return kernel pointers the verifier tracks; the field is
    // read with a checked kernel read.
    let orig_ax = unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs;
        bpf_probe_read_kernel(&raw const (*regs).orig_rax)
    };
    matches!(orig_ax, Ok(u64::MAX | SYS_URETPROBE | SYS_UPROBE))
}

/// Count one sample of `cur`, and whether it was in a trap.
#[inline(always)]
fn count_trap_sample(cur: &Current, in_trap: bool) {
    if let Some(s) = TRAP_SAMPLES.get_ptr_mut(&cur.tid) {
        // SAFETY: map value pointer; a lost update under a race only undercounts.
        unsafe {
            (*s).samples += 1;
            (*s).in_trap += u64::from(in_trap);
        }
    } else {
        // A full map drops the least recently sampled thread: nothing to count as lost.
        let _ = TRAP_SAMPLES.insert(&cur.tid, &TrapSamples { tgid: cur.tgid, _reserved: 0, samples: 1, in_trap: u64::from(in_trap) }, 0);
    }
}
