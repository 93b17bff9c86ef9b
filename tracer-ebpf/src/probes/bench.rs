//! The physical floor for benchmarks: a bare counting uprobe, attached by
//! `gputrace-uprobe-floor` to the same function gputrace probes, so that gputrace's added
//! cost per call can be compared with the least any uprobe can cost (issue 9's figure of merit).
//! The same two programs measure what a trap costs on this kernel (`tracer/src/probes/
//! trap_cost.rs`): the entry one on functions that begin with each kind of instruction, the
//! return one on a function's return.

use aya_ebpf::{macros::map, maps::PerCpuArray};

#[map]
static FLOOR_HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

fn count() -> u32 {
    if let Some(n) = FLOOR_HITS.get_ptr_mut(0) {
        // SAFETY: a per-CPU slot, touched only by this CPU with preemption disabled.
        unsafe { *n += 1 };
    }
    0
}

uprobe_pair! {
    entry uprobe_floor(_ctx) {
        count()
    }
}

uprobe_pair! {
    ret uretprobe_floor(_ctx) {
        count()
    }
}
