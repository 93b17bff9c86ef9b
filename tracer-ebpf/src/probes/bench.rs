//! The physical floor for benchmarks: a bare counting uprobe, attached by
//! `gputrace-uprobe-floor` to the same function gputrace probes, so that gputrace's added
//! cost per call can be compared with the least any uprobe can cost (issue 9's figure of merit).

use aya_ebpf::{macros::map, macros::uprobe, maps::PerCpuArray, programs::ProbeContext};

#[map]
static FLOOR_HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[uprobe]
pub fn uprobe_floor(_ctx: ProbeContext) -> u32 {
    if let Some(n) = FLOOR_HITS.get_ptr_mut(0) {
        // SAFETY: a per-CPU slot, touched only by this CPU with preemption disabled.
        unsafe { *n += 1 };
    }
    0
}
