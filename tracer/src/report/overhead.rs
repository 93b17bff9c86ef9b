//! What tracing cost the job. Two measures, one correcting the other:
//! - the **model**: every probe hit is a uprobe trap on the job's thread, whose cost depends
//!   on the instruction the probe sits on (`probes::trap_cost`, measured apart at the end of
//!   the session), plus a return probe's own cost and our programs' run time as the kernel
//!   accounted it. It says which probe cost what, but its trap costs come from gputrace's own
//!   calibration code, and the same trap costs the job's threads more or less from one run,
//!   even one second, to the next (docs/benchmarks.md).
//! - the **samples**: the CPU sampler sees, 99 times a second, whether a traced thread is
//!   inside one of our traps. The share it finds is the cost in the job itself, all of it,
//!   but only a total, and a noisy one until enough samples land in traps.
//!
//! The samples are shown beside the model, not applied to it: a sample in the kernel entered
//! by an exception without an error code is taken for a trap, and on x86-64 page faults and
//! interrupts taken from user mode enter the kernel the same way (their error code moved
//! out, `orig_ax` set to -1), so the samples' figure is an upper bound that a job that faults
//! a lot inflates. The thread that paid the most was slowed the most.

use gputrace_common::spec_of;

use crate::model::{Overhead, ProbeCost, SampledCost};
use crate::{
    evidence::Evidence,
    probes::{
        trap_cost::{costs_by_probe, has_return, TrapCosts, TrapSampling},
        AttachedLibrary,
    },
};

/// In-trap samples needed before their ratio to the model is shown: the count's Poisson
/// error is then 1/√30 ≈ 18 %.
pub const MIN_IN_TRAP: u64 = 30;

/// What the samples saw spent in traps over what the model charged for the same threads
/// (`modelled_ns`). None while too few samples landed in a trap to say.
#[must_use]
pub fn sampled_scale(sampling: &TrapSampling, modelled_ns: f64) -> Option<f64> {
    (sampling.in_trap >= MIN_IN_TRAP && sampling.hz > 0 && modelled_ns > 0.0).then(|| in_trap_ns(sampling) / modelled_ns)
}

fn in_trap_ns(sampling: &TrapSampling) -> f64 {
    if sampling.hz == 0 {
        return 0.0;
    }
    sampling.in_trap as f64 * 1e9 / sampling.hz as f64
}

/// What tracing cost the job over a window of `window_ns`: each probe's hits charged at the
/// trap cost of the instruction it sits on (`measured` where the session measured them, else
/// an assumed cost), the busiest thread's slowdown, and the CPU samples' figure beside the
/// model. `entry_only`: the session attached no return probes (one trap per call).
#[must_use]
pub fn estimate(ev: &Evidence, window_ns: u64, entry_only: bool, libraries: &[AttachedLibrary], measured: Option<&TrapCosts>) -> Overhead {
    estimate_with_threads(ev, window_ns, entry_only, libraries, measured).0
}

/// What the probes added to each thread's time, ns, by the same model as [`estimate`]: the
/// step model takes it out, so that a fix is promised for the job as it runs untraced (a
/// twin run without gputrace is what a user measures).
#[must_use]
pub fn per_thread_ns(ev: &Evidence, entry_only: bool, libraries: &[AttachedLibrary], measured: Option<&TrapCosts>) -> std::collections::HashMap<u32, f64> {
    estimate_with_threads(ev, 0, entry_only, libraries, measured).1
}

fn estimate_with_threads(
    ev: &Evidence,
    window_ns: u64,
    entry_only: bool,
    libraries: &[AttachedLibrary],
    measured: Option<&TrapCosts>,
) -> (Overhead, std::collections::HashMap<u32, f64>) {
    let costs = costs_by_probe(libraries, measured, entry_only);
    let traps_of = |id: u32, n: u64| n.saturating_mul(if has_return(id, entry_only) { 2 } else { 1 });
    let modelled_of = |id: u32, n: u64| costs.get(&id).map_or(0.0, |(_, e, r)| n as f64 * (e + r));
    let per_thread: Vec<(u32, u64, f64)> = ev
        .threads
        .iter()
        .map(|(tid, t)| {
            let hits = t.hits.iter().enumerate().map(|(id, &n)| (id as u32, n));
            let (traps, ns) = hits.fold((0u64, 0.0), |(traps, ns), (id, n)| (traps.saturating_add(traps_of(id, n)), ns + modelled_of(id, n)));
            (*tid, traps, ns)
        })
        .collect();
    let traps: u64 = per_thread.iter().map(|(_, n, _)| *n).fold(0, u64::saturating_add);
    let modelled_ns: f64 = per_thread.iter().map(|(_, _, ns)| ns).sum();
    let sampling = measured.and_then(|m| m.sampled);
    // Shown beside the model, not applied to it (module docs).
    let scale = sampling.and_then(|s| sampled_scale(&s, modelled_ns));
    let total_ns = modelled_ns;
    let (busiest_tid, _, busiest_modelled_ns) = per_thread.iter().copied().max_by(|a, b| a.2.total_cmp(&b.2)).unwrap_or_default();
    let busiest_ns = busiest_modelled_ns;
    let mut per_probe: Vec<ProbeCost> = ev
        .hits()
        .into_iter()
        .filter_map(|(id, hits)| {
            let spec = spec_of(id)?;
            let (kind, entry_ns, return_ns) = costs.get(&id).copied()?;
            let program_ns = measured.and_then(|m| m.program_ns.get(&id)).map(|p| p.entry_ns + if return_ns > 0.0 { p.return_ns } else { 0.0 });
            Some(ProbeCost { symbol: spec.symbol.into(), entry: kind, entry_ns, return_ns, program_ns, hits, cost_s: modelled_of(id, hits) / 1e9 })
        })
        .collect();
    per_probe.sort_by(|a, b| b.cost_s.total_cmp(&a.cost_s));
    let basis = if measured.is_some() { "measured" } else { "assumed" };
    let by_thread = per_thread.iter().map(|&(tid, _, ns)| (tid, ns)).collect();
    let overhead = Overhead {
        traps,
        trap_ns: if traps == 0 { measured.map_or(TrapCosts::ASSUMED_NS, |c| c.push_ns) } else { total_ns / traps as f64 },
        estimated_s: total_ns / 1e9,
        busiest_thread: (busiest_ns > 0.0).then_some(busiest_tid),
        busiest_thread_s: busiest_ns / 1e9,
        // The slowdown of the most-trapped thread: its lost time over the window.
        fraction_of_window: if window_ns == 0 { 0.0 } else { (busiest_ns / window_ns as f64).min(1.0) },
        basis: basis.into(),
        modelled_s: modelled_ns / 1e9,
        sampled: sampling.map(|s| SampledCost { samples: s.samples, in_trap: s.in_trap, in_trap_s: in_trap_ns(&s) / 1e9, scale, min_in_trap: MIN_IN_TRAP }),
        measured: measured.cloned(),
        per_probe,
    };
    (overhead, by_thread)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_common::Family;

    #[test]
    fn launches_trap_once_calls_twice_and_the_busiest_thread_sets_the_fraction() {
        let launch = gputrace_common::PROBES.iter().find(|p| p.family == Family::Launch).expect("a launch probe").id;
        let sync = gputrace_common::PROBES.iter().find(|p| p.family == Family::Sync).expect("a sync probe").id;
        let mut ev = Evidence::default();
        let mut a = gputrace_common::ThreadCounters { tgid: 1, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
        a.hits[launch as usize] = 100_000;
        a.hits[sync as usize] = 1_000;
        ev.add_counters(10, &a);
        let mut b = a;
        b.hits = [0; gputrace_common::probe::PROBE_SLOTS];
        b.hits[launch as usize] = 10;
        ev.add_counters(11, &b);
        let o = estimate(&ev, 1_000_000_000, false, &[], None);
        assert_eq!(o.traps, 100_000 + 2_000 + 10);
        // No measurement: 1 µs a trap, as assumed before.
        assert_eq!(o.busiest_thread, Some(10));
        assert!((o.busiest_thread_s - 0.102).abs() < 1e-9);
        assert!((o.fraction_of_window - 0.102).abs() < 1e-9, "102,000 µs of traps in a 1 s window");
        assert_eq!(o.basis, "assumed");
        assert_eq!(estimate(&Evidence::default(), 0, false, &[], None).busiest_thread, None);
        assert_eq!(estimate(&ev, 1_000_000_000, true, &[], None).traps, 100_000 + 1_000 + 10, "entry-only: one trap per call");
    }

    #[test]
    fn measured_costs_charge_each_probe_by_the_instruction_it_sits_on() {
        use crate::{discover::libraries::Library, probes::trap_cost::EntryKind};
        let launch = gputrace_common::PROBES.iter().find(|p| p.family == Family::Launch).expect("a launch probe");
        let sync = gputrace_common::PROBES.iter().find(|p| p.family == Family::Sync).expect("a sync probe");
        let mut ev = Evidence::default();
        let mut a = gputrace_common::ThreadCounters { tgid: 1, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
        a.hits[launch.id as usize] = 1_000;
        a.hits[sync.id as usize] = 1_000;
        ev.add_counters(10, &a);
        let lib = AttachedLibrary {
            library: Library { dev: 1, inode: 2, open_path: "/x".into(), name: "libcuda.so.1".into() },
            symbols: vec![launch.symbol, sync.symbol],
            mapped_by: std::collections::BTreeSet::new(),
            probed_late_for: std::collections::BTreeSet::new(),
            entry: [(launch.symbol, EntryKind::Push), (sync.symbol, EntryKind::Stepped)].into_iter().collect(),
        };
        let costs = TrapCosts { push_ns: 800.0, stepped_ns: 9_000.0, return_ns: 500.0, ..TrapCosts::default() };
        let o = estimate(&ev, 1_000_000_000, false, std::slice::from_ref(&lib), Some(&costs));
        assert_eq!(o.basis, "measured");
        assert_eq!(o.traps, 1_000 + 2_000);
        // 1,000 launches on a push: 0.8 ms; 1,000 syncs single-stepped with a return: 9.5 ms.
        assert!((o.estimated_s - 0.0103).abs() < 1e-9, "{}", o.estimated_s);
        assert_eq!(o.per_probe[0].symbol, sync.symbol, "the costliest probe first");
        assert_eq!(o.per_probe[0].entry, Some(EntryKind::Stepped));
        assert!((o.per_probe[0].cost_s - 0.0095).abs() < 1e-9);
        assert!((o.fraction_of_window - 0.0103).abs() < 1e-9);

        // The kernel's accounting of our programs adds their run time to each call.
        let mut with_programs = costs.clone();
        with_programs.program_ns.insert(sync.id, crate::probes::trap_cost::ProgramNs { entry_ns: 1_200.0, return_ns: 300.0, runs: 1_000 });
        let o = estimate(&ev, 1_000_000_000, false, &[lib], Some(&with_programs));
        // 1,000 syncs: 9 µs + 1.2 µs at entry, 0.5 µs + 0.3 µs at return.
        assert!((o.estimated_s - 0.0008 - 0.011).abs() < 1e-9, "{}", o.estimated_s);
        let sync_cost = o.per_probe.iter().find(|p| p.symbol == sync.symbol).expect("the sync");
        assert_eq!(sync_cost.program_ns, Some(1_500.0));
        assert!(o.per_probe.iter().find(|p| p.symbol == launch.symbol).expect("the launch").program_ns.is_none());
    }

    #[test]
    fn enough_samples_in_traps_are_set_beside_the_model_not_applied_to_it() {
        let sync = gputrace_common::PROBES.iter().find(|p| p.family == Family::Sync).expect("a sync probe");
        let mut ev = Evidence::default();
        let mut a = gputrace_common::ThreadCounters { tgid: 1, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
        a.hits[sync.id as usize] = 100_000;
        ev.add_counters(10, &a);
        // The model: 100,000 syncs at 1 µs a trap and a return: 0.1 s.
        let model = TrapCosts { stepped_ns: 500.0, return_ns: 500.0, ..TrapCosts::default() };
        let o = estimate(&ev, 2_000_000_000, false, &[], Some(&model));
        assert_eq!(o.basis, "measured");
        assert!((o.estimated_s - 0.1).abs() < 1e-9 && (o.modelled_s - 0.1).abs() < 1e-9, "{}", o.estimated_s);
        assert!(o.sampled.is_none());

        // 99 samples a second found the thread in a trap 30 times: 0.303 s, three times the model.
        let sampled = TrapCosts { sampled: Some(TrapSampling { samples: 198, in_trap: 30, hz: 99 }), ..model.clone() };
        let o = estimate(&ev, 2_000_000_000, false, &[], Some(&sampled));
        assert_eq!(o.basis, "measured");
        assert!((o.estimated_s - 0.1).abs() < 1e-9, "the model stands: {}", o.estimated_s);
        let s = o.sampled.as_ref().expect("the samples are shown");
        assert!((s.in_trap_s - 30.0 / 99.0).abs() < 1e-9);
        assert!(s.scale.is_some_and(|k| (k - 30.0 / 99.0 / 0.1).abs() < 1e-9), "{s:?}");

        // Too few samples in traps to say: no ratio.
        let few = TrapCosts { sampled: Some(TrapSampling { samples: 198, in_trap: MIN_IN_TRAP - 1, hz: 99 }), ..model };
        let o = estimate(&ev, 2_000_000_000, false, &[], Some(&few));
        assert_eq!(o.sampled.as_ref().map(|s| (s.in_trap, s.scale)), Some((MIN_IN_TRAP - 1, None)));
    }
}
