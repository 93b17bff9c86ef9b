//! What tracing cost the job, estimated from what the probes counted: every probe hit is a
//! uprobe trap on the job's thread (two for calls with a return probe), and the thread that
//! took the most traps was slowed the most.

use gputrace_common::{spec_of, Family};

use super::model::Overhead;
use crate::evidence::Evidence;

/// Host time one uprobe trap costs the traced thread, gputrace's own work included. A bare
/// counting uprobe costs ~0.9 µs per hit on the GPU machine (FACTS.md; two probes added
/// 1.83 µs to a 6.8 µs `add_`), and gputrace's programs add ~4 % to that floor
/// (docs/benchmarks.md). Rounded up, so the estimate errs high.
pub const TRAP_NS: f64 = 1_000.0;

/// Traps per hit of probe `id`: entry-only probes trap once, probes with a return probe twice
/// (once in entry-only mode, where no return probe is attached).
fn traps(id: u32, entry_only: bool) -> u64 {
    match spec_of(id).map(|s| s.family) {
        Some(Family::Launch | Family::GraphLaunch) => 1,
        Some(_) if entry_only => 1,
        Some(_) => 2,
        None => 0,
    }
}

#[must_use]
pub fn estimate(ev: &Evidence, window_ns: u64, entry_only: bool) -> Overhead {
    let per_thread: Vec<(u32, u64)> = ev
        .threads
        .iter()
        .map(|(tid, t)| (*tid, t.hits.iter().enumerate().map(|(id, &n)| n.saturating_mul(traps(id as u32, entry_only))).fold(0, u64::saturating_add)))
        .collect();
    let total: u64 = per_thread.iter().map(|(_, n)| *n).fold(0, u64::saturating_add);
    let (busiest_tid, busiest) = per_thread.iter().copied().max_by_key(|(_, n)| *n).unwrap_or_default();
    let cost_s = |traps: u64| traps as f64 * TRAP_NS / 1e9;
    Overhead {
        traps: total,
        trap_ns: TRAP_NS,
        estimated_s: cost_s(total),
        busiest_thread: (busiest > 0).then_some(busiest_tid),
        busiest_thread_s: cost_s(busiest),
        // The slowdown of the most-trapped thread: its lost time over the window.
        fraction_of_window: if window_ns == 0 { 0.0 } else { (cost_s(busiest) / (window_ns as f64 / 1e9)).min(1.0) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_trap_once_calls_twice_and_the_busiest_thread_sets_the_fraction() {
        let launch = gputrace_common::PROBES.iter().find(|p| p.family == Family::Launch).expect("a launch probe").id;
        let sync = gputrace_common::PROBES.iter().find(|p| p.family == Family::Sync).expect("a sync probe").id;
        let mut ev = Evidence::default();
        let mut a = gputrace_common::ThreadCounters { tgid: 1, _reserved: 0, drained_at_ns: 0, hits: [0; gputrace_common::probe::PROBE_SLOTS] };
        a.hits[launch as usize] = 100_000;
        a.hits[sync as usize] = 1_000;
        ev.add_counters(10, &a);
        let mut b = a;
        b.hits = [0; gputrace_common::probe::PROBE_SLOTS];
        b.hits[launch as usize] = 10;
        ev.add_counters(11, &b);
        let o = estimate(&ev, 1_000_000_000, false);
        assert_eq!(o.traps, 100_000 + 2_000 + 10);
        assert_eq!(o.busiest_thread, Some(10));
        assert!((o.busiest_thread_s - 0.102).abs() < 1e-9);
        assert!((o.fraction_of_window - 0.102).abs() < 1e-9, "102,000 µs of traps in a 1 s window");
        assert_eq!(estimate(&Evidence::default(), 0, false).busiest_thread, None);
        assert_eq!(estimate(&ev, 1_000_000_000, true).traps, 100_000 + 1_000 + 10, "entry-only: one trap per call");
    }
}
