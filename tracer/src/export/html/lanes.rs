//! The recording folded into a fixed number of time bins, one row of numbers per lane of the
//! page's timeline. Aggregating, not listing events, keeps a page of a ten-minute recording
//! as small as one of ten seconds (`BINS` columns whatever the length).
//!
//! What each lane is made of, and at what resolution:
//! - GPU utilization and SM activity: NVML samples averaged per bin (per device);
//! - kernel launches per second: the kernel counters at each checkpoint (about once a
//!   second), spread over the checkpoint's interval — launches are counted in the kernel,
//!   not sent one by one;
//! - synchronizes and copies: each call, as it returned (time in syncs spread over the bins
//!   it spans; copy bytes split pinned/pageable by the host-memory answer it was recorded
//!   with);
//! - GPU queue empty: the spells of the launching threads' queues, spread over their bins;
//! - the main thread's state: its scheduler counters between checkpoints (on CPU, runnable,
//!   uninterruptible — I/O —, asleep), and its long off-CPU spells by what woke it;
//! - steps: the times of the step marker the report found.

use std::{collections::BTreeMap, io, path::Path};

use gputrace_common::{spec_of, Family};
use serde::Serialize;

use super::super::walk::{launches_since, walk, Item};
use crate::{
    decode::Event,
    evidence::{
        snapshot::{SchedRaw, Snapshot, ThreadHits},
        waits::WaitKind,
        Evidence,
    },
    record::replay::class_number,
};

/// Columns of the timeline.
pub const BINS: usize = 600;
/// No bin is shorter: finer than this says nothing a 600-pixel lane can show.
const MIN_BIN_NS: u64 = 1_000_000;

/// One lane's numbers per bin.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lanes {
    /// The first bin's start, monotonic ns (the recording's clock).
    pub start_ns: u64,
    /// Each bin's length, ns (1 ms at least).
    pub bin_ns: u64,
    /// How many bins there are (`BINS` at most, fewer for a short window).
    pub bins: usize,
    /// NVML utilization and SM activity (%), by device index; None: no sample in the bin.
    pub gpu_util: BTreeMap<u32, Vec<Option<f64>>>,
    /// GPM's SM activity (%), by device index; None: no sample in the bin.
    pub sm_active: BTreeMap<u32, Vec<Option<f64>>>,
    /// Kernel and graph launches per second of the traced processes.
    pub launches_per_s: Vec<Option<f64>>,
    /// Synchronizing calls returned in the bin, and the time spent in them within it.
    pub syncs: Vec<u32>,
    /// Nanoseconds spent inside synchronizing calls within the bin.
    pub sync_ns: Vec<u64>,
    /// Bytes copied, and of them from or to pageable host memory.
    pub copy_bytes: Vec<u64>,
    /// Of `copy_bytes`, those from or to pageable host memory.
    pub pageable_bytes: Vec<u64>,
    /// Time a launching thread's GPU queue sat empty (at most the bin, summed over threads
    /// and capped).
    pub queue_empty_ns: Vec<u64>,
    /// The main thread's state: on CPU, runnable, uninterruptible (I/O), asleep (fractions).
    pub thread_state: Vec<Option<[f64; 4]>>,
    /// The main thread's long off-CPU time in the bin by what woke it (`WaitKind::ALL` order).
    pub woken_by: Vec<[u64; 7]>,
    /// Step markers in the bin.
    pub steps: Vec<u32>,
    /// Flight-recorder triggers: time and what fired.
    pub triggers: Vec<(u64, String)>,
}

/// What the lanes are about: the window, the main thread and its helpers, the step marker.
#[derive(Debug)]
pub struct Scope<'a> {
    /// The window's start, monotonic ns.
    pub start_ns: u64,
    /// The window's end, monotonic ns.
    pub end_ns: u64,
    /// The thread the time account follows (the report's `time_account.tid`); None without one.
    pub main_tid: Option<u32>,
    /// The evidence the report was built from.
    pub evidence: &'a Evidence,
    /// When each step began, monotonic ns (the step marker's times); empty without steps.
    pub step_times: &'a [u64],
}

impl Lanes {
    fn new(start_ns: u64, end_ns: u64) -> Self {
        let span = end_ns.saturating_sub(start_ns).max(1);
        let bin_ns = span.div_ceil(BINS as u64).max(MIN_BIN_NS);
        let bins = usize::try_from(span.div_ceil(bin_ns)).unwrap_or(BINS).clamp(1, BINS);
        Self {
            start_ns,
            bin_ns,
            bins,
            launches_per_s: vec![None; bins],
            syncs: vec![0; bins],
            sync_ns: vec![0; bins],
            copy_bytes: vec![0; bins],
            pageable_bytes: vec![0; bins],
            queue_empty_ns: vec![0; bins],
            thread_state: vec![None; bins],
            woken_by: vec![[0; 7]; bins],
            steps: vec![0; bins],
            ..Self::default()
        }
    }

    /// The bin of a time; times outside the window clamp to its ends.
    fn bin(&self, ns: u64) -> usize {
        usize::try_from(ns.saturating_sub(self.start_ns) / self.bin_ns).unwrap_or(usize::MAX).min(self.bins - 1)
    }

    /// Each bin's overlap with `[from, to)`, in ns.
    fn overlaps(&self, from: u64, to: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (from, to) = (from.max(self.start_ns), to.min(self.start_ns + self.bin_ns * self.bins as u64));
        let first = self.bin(from);
        let last = if to > from { self.bin(to - 1) } else { first };
        (first..=last).filter(move |_| to > from).map(move |b| {
            let lo = self.start_ns + b as u64 * self.bin_ns;
            (b, to.min(lo + self.bin_ns) - from.max(lo))
        })
    }
}

/// Fold the recording at `file` into lanes.
pub fn collect(file: &Path, scope: &Scope<'_>) -> io::Result<Lanes> {
    let mut lanes = Lanes::new(scope.start_ns, scope.end_ns);
    let mut fold = Fold { lanes: &mut lanes, main_tid: scope.main_tid, answers: Vec::new(), previous: None, exited: Vec::new(), nvml: BTreeMap::new() };
    walk(file, |item| {
        fold.item(item);
        Ok(())
    })?;
    fold.finish_nvml();
    for &t in scope.step_times {
        if (scope.start_ns..scope.end_ns).contains(&t) {
            let b = lanes.bin(t);
            lanes.steps[b] += 1;
        }
    }
    woken_by(&mut lanes, scope);
    Ok(lanes)
}

struct Fold<'a> {
    lanes: &'a mut Lanes,
    main_tid: Option<u32>,
    /// Host-memory answers recorded for the next event.
    answers: Vec<u32>,
    previous: Option<Box<Snapshot>>,
    exited: Vec<ThreadHits>,
    /// NVML sums and counts per (metric, device, bin).
    nvml: BTreeMap<(bool, u32, usize), (f64, u32)>,
}

impl Fold<'_> {
    fn item(&mut self, item: Item) {
        match item {
            Item::HostClass(a) => self.answers.push(a.class),
            Item::Event(e) => {
                self.event(&e);
                self.answers.clear();
            }
            Item::ThreadExit(tid, c) => self.exited.push(ThreadHits::of(tid, &c)),
            Item::Checkpoint(s) => self.checkpoint(s),
            Item::GpuSamples(samples) => {
                for s in samples {
                    let b = self.lanes.bin(s.at_ns);
                    for (sm, v) in [(false, s.util_pct), (true, s.sm_pct)] {
                        if let Some(v) = v {
                            let e = self.nvml.entry((sm, s.device, b)).or_default();
                            e.0 += v;
                            e.1 += 1;
                        }
                    }
                }
            }
            Item::Trigger(t) => self.lanes.triggers.push((t.at_ns, t.diagnosis.unwrap_or(t.reason))),
        }
    }

    fn event(&mut self, e: &Event) {
        let lanes = &mut *self.lanes;
        match e {
            Event::Call(c) => {
                let Some(spec) = spec_of(c.header.probe) else { return };
                let end = c.header.ts_ns;
                match spec.family {
                    Family::Sync => {
                        let b = lanes.bin(end);
                        lanes.syncs[b] += 1;
                        for (b, ns) in lanes.overlaps(c.start_ns, end).collect::<Vec<_>>() {
                            lanes.sync_ns[b] += ns;
                        }
                    }
                    Family::Copy => {
                        let bytes = spec.size_arg.map_or(0, |i| c.args[usize::from(i)]);
                        let b = lanes.bin(end);
                        lanes.copy_bytes[b] += bytes;
                        if self.answers.contains(&class_number(crate::evidence::HostClass::Pageable)) {
                            lanes.pageable_bytes[b] += bytes;
                        }
                    }
                    _ => {}
                }
            }
            Event::IdleEnd(i) => {
                for (b, ns) in lanes.overlaps(i.drained_at_ns, i.header.ts_ns).collect::<Vec<_>>() {
                    lanes.queue_empty_ns[b] = (lanes.queue_empty_ns[b] + ns).min(lanes.bin_ns);
                }
            }
            _ => {}
        }
    }

    /// Launch rates and the main thread's states over the interval since the last checkpoint.
    fn checkpoint(&mut self, s: Box<Snapshot>) {
        let exited = std::mem::take(&mut self.exited);
        let Some(prev) = self.previous.replace(s) else { return };
        let s = self.previous.as_deref().unwrap_or(&prev);
        let span_ns = s.at_ns.saturating_sub(prev.at_ns);
        if span_ns == 0 {
            return;
        }
        let launches: u64 = launches_since(&prev, s, &exited).values().sum();
        let rate = launches as f64 * 1e9 / span_ns as f64;
        let state = self.main_tid.and_then(|tid| {
            let now = s.sched.iter().find(|t| t.tid == tid)?;
            let then = prev.sched.iter().find(|t| t.tid == tid).map_or_else(SchedRaw::default, |t| t.sched.clone());
            let d = now.sched.closed_at(s.at_ns).since(&then.closed_at(prev.at_ns));
            let f = |ns: u64| (ns as f64 / span_ns as f64).min(1.0);
            Some([f(d.on_cpu_ns), f(d.runqueue_ns), f(d.blocked_ns), f(d.sleep_ns)])
        });
        let lanes = &mut *self.lanes;
        for (b, _) in lanes.overlaps(prev.at_ns, s.at_ns).collect::<Vec<_>>() {
            lanes.launches_per_s[b] = Some(rate);
            if state.is_some() {
                lanes.thread_state[b] = state;
            }
        }
    }

    fn finish_nvml(&mut self) {
        let bins = self.lanes.bins;
        for (&(sm, device, b), &(sum, n)) in &self.nvml {
            let lane = if sm { &mut self.lanes.sm_active } else { &mut self.lanes.gpu_util };
            lane.entry(device).or_insert_with(|| vec![None; bins])[b] = Some(sum / f64::from(n));
        }
        for v in self.lanes.gpu_util.values_mut().chain(self.lanes.sm_active.values_mut()) {
            hold(v);
        }
    }
}

/// A sampled reading holds until the next one: NVML samples every 100 ms or so while a bin
/// may be 1 ms. A gap of over three sampling intervals (NVML stopped answering) stays a gap.
fn hold(values: &mut [Option<f64>]) {
    let sampled: Vec<usize> = values.iter().enumerate().filter(|(_, v)| v.is_some()).map(|(i, _)| i).collect();
    let mut gaps: Vec<usize> = sampled.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_unstable();
    let limit = 3 * gaps.get(gaps.len() / 2).copied().unwrap_or(1);
    for w in sampled.windows(2) {
        let (from, to) = (w[0], w[1]);
        if to - from <= limit {
            let v = values[from];
            values[from + 1..to].fill(v);
        }
    }
    // After the last sample: one interval.
    if let Some(&last) = sampled.last() {
        let end = (last + limit / 3).min(values.len());
        let v = values[last];
        values[last + 1..end.max(last + 1)].fill(v);
    }
}

/// The main thread's long off-CPU spells, each by what its wakeup was classified as.
fn woken_by(lanes: &mut Lanes, scope: &Scope<'_>) {
    let Some(tid) = scope.main_tid else { return };
    for s in scope.evidence.long_sleeps.iter().filter(|s| s.tid == tid) {
        let kind = scope
            .evidence
            .wakes
            .iter()
            .find(|w| w.matches(s.tid, s.waker_pid, s.stack_id, s.in_cuda))
            .map_or(if s.in_cuda { WaitKind::Gpu } else { WaitKind::Other }, |w| w.kind);
        let k = WaitKind::ALL.iter().position(|&a| a == kind).unwrap_or(WaitKind::ALL.len() - 1);
        for (b, ns) in lanes.overlaps(s.start_ns, s.end_ns).collect::<Vec<_>>() {
            lanes.woken_by[b][k] += ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_the_window_and_overlaps_split_a_spell() {
        let lanes = Lanes::new(1_000_000_000, 11_000_000_000);
        assert_eq!(lanes.bins, BINS);
        assert_eq!(lanes.bin(1_000_000_000), 0);
        assert_eq!(lanes.bin(10_999_999_999), BINS - 1);
        assert_eq!(lanes.bin(50_000_000_000), BINS - 1, "clamped");
        let bin = lanes.bin_ns;
        let spell: Vec<_> = lanes.overlaps(1_000_000_000 + bin / 2, 1_000_000_000 + 2 * bin + 1).collect();
        assert_eq!(spell, vec![(0, bin - bin / 2), (1, bin), (2, 1)]);
        assert!(lanes.overlaps(5, 5).next().is_none(), "an empty spell covers nothing");
    }

    #[test]
    fn samples_hold_until_the_next_but_not_across_an_outage() {
        let mut v = vec![Some(1.0), None, None, Some(2.0), None, None, Some(3.0), None, None, None, None, None, None, None, None, None, Some(4.0), None, None];
        hold(&mut v);
        let held: Vec<Option<f64>> = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0].into_iter().map(Some).collect();
        assert_eq!(&v[..7], held.as_slice());
        assert_eq!(v[7..16], [None; 9], "a gap of 10 bins against a 3-bin interval is an outage");
        assert_eq!(&v[16..], &[Some(4.0), Some(4.0), Some(4.0)]);
    }

    #[test]
    fn a_short_window_gets_millisecond_bins() {
        let lanes = Lanes::new(0, 50_000_000);
        assert_eq!(lanes.bin_ns, MIN_BIN_NS);
        assert_eq!(lanes.bins, 50);
    }
}
