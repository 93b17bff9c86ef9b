//! `tracer.stacks`: how many native stacks were taken, and how many could name code, were cut
//! short in a system or CUDA library, or failed (docs/report.md).

use std::collections::BTreeMap;

use super::{
    alloc::AllocStack,
    sites::{usability, Usability},
    Frame, Origin, StackTime,
};
use crate::model::{ProcessStackCounts, StackCounts};

/// Count the native stacks: samples, off-CPU spells and allocations (failed ones included),
/// each weighted by how many it stands for.
#[must_use]
pub fn count(stacks: &[StackTime], allocs: &[AllocStack]) -> StackCounts {
    let mut by_pid: BTreeMap<u32, ProcessStackCounts> = BTreeMap::new();
    let mut add = |pid: u32, frames: &[Frame], n: u64| {
        let c = by_pid.entry(pid).or_insert_with(|| ProcessStackCounts { pid, ..ProcessStackCounts::default() });
        c.taken += n;
        match usability(frames) {
            Usability::Usable => c.usable += n,
            Usability::CutShort => c.cut_short += n,
            Usability::Failed => c.failed += n,
        }
    };
    for s in stacks.iter().filter(|s| s.origin == Origin::Native) {
        add(s.pid, &s.frames, s.count);
    }
    for a in allocs.iter().filter(|a| a.origin == Origin::Native) {
        add(a.pid, &a.frames, a.count + a.failed);
    }
    let processes: Vec<ProcessStackCounts> = by_pid.into_values().filter(|c| c.taken > 0).collect();
    StackCounts {
        taken: processes.iter().map(|c| c.taken).sum(),
        usable: processes.iter().map(|c| c.usable).sum(),
        cut_short: processes.iter().map(|c| c.cut_short).sum(),
        failed: processes.iter().map(|c| c.failed).sum(),
        processes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::Activity;

    fn native(pid: u32, frames: Vec<Frame>, count: u64) -> StackTime {
        StackTime { tid: pid, pid, activity: Activity::Host, on_cpu: true, origin: Origin::Native, frames, count, ns: count, launch_ages: crate::stacks::LaunchAges::default() }
    }

    fn frame(function: &str, module: &str) -> Frame {
        Frame { function: function.into(), file: None, line: None, module: Some(module.into()) }
    }

    #[test]
    fn stacks_are_counted_per_process_by_how_far_they_reach() {
        let stacks = vec![
            native(1, vec![frame("compute", "/w/job")], 5),
            native(1, vec![frame("__GI___clock_nanosleep", "/lib/libc.so.6")], 3),
            native(2, Vec::new(), 2),
        ];
        let allocs = vec![AllocStack {
            pid: 2,
            tid: 2,
            origin: Origin::Native,
            frames: vec![frame("grow", "/w/job")],
            count: 4,
            failed: 1,
            ..AllocStack::default()
        }];
        let c = count(&stacks, &allocs);
        assert_eq!((c.taken, c.usable, c.cut_short, c.failed), (15, 10, 3, 2));
        assert_eq!(c.processes.iter().map(|p| (p.pid, p.taken)).collect::<Vec<_>>(), [(1, 8), (2, 7)]);
    }
}
