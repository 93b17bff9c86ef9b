//! The CPU sampler: a perf event fires on every CPU [`SAMPLE_HZ`] times a second; when it
//! interrupts a traced thread, its user stack is counted under the CUDA call the thread was
//! in (`SAMPLES`). User space turns the counts into time per call site.
//!
//! [`SAMPLE_HZ`]: gputrace_common::host::stacks::SAMPLE_HZ

use aya_ebpf::{macros::perf_event, programs::PerfEventContext};
use gputrace_common::{stack_source, SampleKey};

use crate::{
    maps::{count_sample, current_call, stacks_on, traced_current, BPF_F_USER_STACK, USER_STACKS},
    stack_copy::copy_user_stack,
};

#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    try_sample_cpu(&ctx);
    0
}

/// A sample whose stack could be copied is counted by user space once unwound; otherwise
/// (the ring full) here, under its frame-pointer stack.
#[inline(always)]
fn try_sample_cpu(ctx: &PerfEventContext) {
    if !stacks_on() {
        return;
    }
    let Some(cur) = traced_current() else { return };
    let (probe, call_stack) = current_call(cur.tid);
    // Inside a sync or blocking copy: the stack the call was entered with.
    if let Some(stack_id) = call_stack {
        count_sample(&SampleKey { tgid: cur.tgid, tid: cur.tid, stack_id, probe, off_cpu: 0 }, 0);
        return;
    }
    // SAFETY: the map is a stack-trace map; a failure (map full, no user stack) gives -1.
    let stack_id = unsafe { USER_STACKS.get_stackid(ctx, BPF_F_USER_STACK) }.unwrap_or(-1);
    if copy_user_stack(&cur, stack_source::CPU, probe, stack_id).is_some() {
        return;
    }
    let key = SampleKey { tgid: cur.tgid, tid: cur.tid, stack_id, probe, off_cpu: 0 };
    count_sample(&key, 0);
}
