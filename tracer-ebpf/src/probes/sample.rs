//! The CPU sampler: a perf event fires on every CPU [`SAMPLE_HZ`] times a second; when it
//! interrupts a traced thread, its user stack is counted under the CUDA call the thread was
//! in (`SAMPLES`). User space turns the counts into time per call site.
//!
//! [`SAMPLE_HZ`]: gputrace_common::host::stacks::SAMPLE_HZ

use aya_ebpf::{macros::perf_event, programs::PerfEventContext};
use gputrace_common::SampleKey;

use crate::maps::{count_sample, current_call, stacks_on, traced_current, BPF_F_USER_STACK, USER_STACKS};

#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    if !stacks_on() {
        return 0;
    }
    let Some(cur) = traced_current() else { return 0 };
    // SAFETY: the map is a stack-trace map; a failure (map full, no user stack) gives -1.
    let stack_id = unsafe { USER_STACKS.get_stackid(&ctx, BPF_F_USER_STACK) }.unwrap_or(-1);
    let key = SampleKey { tgid: cur.tgid, tid: cur.tid, stack_id, probe: current_call(cur.tid), off_cpu: 0 };
    count_sample(&key, 0);
    0
}
