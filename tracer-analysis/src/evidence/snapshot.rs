//! What the kernel maps hold at one moment: per-thread launch counters, scheduler
//! accounting, who preempted traced threads, cgroup throttling and loss counters. Events
//! arrive one by one through the ring buffer; these are cumulative counters, read whole.
//!
//! A live session reads one at the end and folds it into the evidence; a recording writes
//! one every second, so a report can be made from any prefix of the file (the last snapshot
//! read) and from any segment (the difference between its last and its first snapshot).

use std::collections::{BTreeMap, BTreeSet};

use gputrace_common::{ThreadCounters, ThreadSched};
use serde::{Deserialize, Serialize};

use super::{sched_io::SchedStats, Evidence};
use crate::evidence::cpu_stat::CpuStat;

/// A thread's launch and call counters: `(probe id, hits)` for the probes it hit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadHits {
    /// The thread.
    pub tid: u32,
    /// Its process.
    pub tgid: u32,
    /// `(probe id, hits)` for each probe with hits, cumulative as the kernel counts them.
    pub hits: Vec<(u32, u64)>,
}

impl ThreadHits {
    /// Thread `tid`'s nonzero counters, from the kernel's per-thread counters `c`.
    #[must_use]
    pub fn of(tid: u32, c: &ThreadCounters) -> Self {
        let hits = c.hits.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(id, &n)| (id as u32, n)).collect();
        Self { tid, tgid: c.tgid, hits }
    }

    /// The counters, less what `baseline` (an earlier reading of the same thread) had.
    #[must_use]
    pub fn counters_since(&self, baseline: Option<&Self>) -> ThreadCounters {
        let mut c = ThreadCounters { tgid: self.tgid, drained_at_ns: 0, ..ThreadCounters::ZERO };
        for &(id, n) in &self.hits {
            if let Some(slot) = c.hits.get_mut(id as usize) {
                *slot = n;
            }
        }
        for &(id, n) in baseline.map_or(&[][..], |b| &b.hits) {
            if let Some(slot) = c.hits.get_mut(id as usize) {
                *slot = slot.saturating_sub(n);
            }
        }
        c
    }
}

/// A thread's scheduler accounting as the kernel keeps it (the state it is in is still open).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadTime {
    /// The thread.
    pub tid: u32,
    /// Its accounting, as read.
    pub sched: SchedRaw,
}

/// [`ThreadSched`], in a form serde can write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedRaw {
    /// The thread's process.
    pub tgid: u32,
    /// The state it is in (`gputrace_common::host::state`).
    pub state: u32,
    /// When it entered that state (monotonic ns).
    pub since_ns: u64,
    /// Time spent in each state, indexed by state, ns; the open spell is not in it.
    pub spent_ns: [u64; 4],
    /// Switches out while still runnable (involuntary).
    pub preemptions: u64,
    /// Switches out by blocking or sleeping.
    pub voluntary_switches: u64,
}

impl From<&ThreadSched> for SchedRaw {
    fn from(s: &ThreadSched) -> Self {
        Self {
            tgid: s.tgid,
            state: s.state,
            since_ns: s.since_ns,
            spent_ns: s.spent_ns,
            preemptions: s.preemptions,
            voluntary_switches: s.voluntary_switches,
        }
    }
}

impl SchedRaw {
    /// The accounting with the open state closed at `at_ns` (0: the thread is gone).
    #[must_use]
    pub fn closed_at(&self, at_ns: u64) -> SchedStats {
        let s = ThreadSched {
            tgid: self.tgid,
            state: self.state,
            since_ns: self.since_ns,
            spent_ns: self.spent_ns,
            preemptions: self.preemptions,
            voluntary_switches: self.voluntary_switches,
        };
        let mut out = SchedStats::default();
        out.add(&s, at_ns);
        out
    }
}

/// Who took a CPU from traced threads: a thread, how often, and (looked up when read) its
/// process and command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preemptor {
    /// The thread that took the CPU.
    pub tid: u32,
    /// Times it took a CPU from a traced thread.
    pub count: u64,
    /// Its process; None where the thread was gone when looked up.
    pub pid: Option<u32>,
    /// Its command name; empty where the thread was gone when looked up.
    pub command: String,
}

/// One reading of the kernel maps (module docs): a live session folds one in at its end;
/// a recording writes one every second.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Monotonic time of the reading.
    pub at_ns: u64,
    /// Per-thread probe counters, cumulative.
    pub threads: Vec<ThreadHits>,
    /// Per-thread scheduler accounting, cumulative.
    pub sched: Vec<ThreadTime>,
    /// Who took CPUs from traced threads, cumulative.
    pub preempted_by: Vec<Preemptor>,
    /// CPU throttling of the tree's cgroups since the session began, by `cpu.stat` file.
    pub cgroups: Vec<(String, CpuStat)>,
    /// Loss counters, indexed by `gputrace_common::loss`.
    pub losses: Vec<u64>,
    /// Off-CPU time by who woke the thread, cumulative, classified when read (the waker's
    /// stack is symbolized on the traced machine; a recording carries the result).
    #[serde(default)]
    pub wakes: Vec<super::waits::Wake>,
    /// Time by user stack (native and Python) and activity, cumulative (`crate::stacks`);
    /// written as a frame table and indexes (`crate::stacks::table`).
    #[serde(default, with = "crate::stacks::table")]
    pub stacks: Vec<crate::stacks::StackTime>,
    /// Device allocations by user stack (native and Python), cumulative (`crate::stacks::alloc`).
    #[serde(default)]
    pub alloc_stacks: Vec<crate::stacks::alloc::AllocStack>,
    /// The caching allocator's blocks live at this moment, by the Python line that asked for
    /// them (a state, not a count: a segment of a recording keeps its end's).
    #[serde(default)]
    pub block_sites: Vec<crate::stacks::alloc::BlockSite>,
}

impl Snapshot {
    /// Mark the timeline of `ev` with this reading (`evidence::timeline`), less what
    /// `baseline` counted, as [`Self::apply`] would fold it.
    pub fn mark(&self, ev: &mut Evidence, baseline: Option<&Self>) {
        let base_sched: BTreeMap<u32, &SchedRaw> = baseline.map(|b| b.sched.iter().map(|t| (t.tid, &t.sched)).collect()).unwrap_or_default();
        let base_at = baseline.map_or(0, |b| b.at_ns);
        let mut sched: Vec<(u32, SchedStats)> = self
            .sched
            .iter()
            .filter(|t| ev.threads.contains_key(&t.tid))
            .map(|t| {
                let stats = t.sched.closed_at(self.at_ns);
                (t.tid, base_sched.get(&t.tid).map_or_else(|| stats.clone(), |b| stats.since(&b.closed_at(base_at))))
            })
            .collect();
        // A CUDA thread gone already: what its exit record folded in (as a live mark has it).
        let gone: Vec<(u32, SchedStats)> =
            ev.threads.keys().filter(|tid| !sched.iter().any(|(t, _)| t == *tid)).filter_map(|tid| Some((*tid, ev.sched.get(tid)?.clone()))).collect();
        sched.extend(gone);
        let base_hits: BTreeMap<u32, &ThreadHits> = baseline.map(|b| b.threads.iter().map(|t| (t.tid, t)).collect()).unwrap_or_default();
        let counters: Vec<(u32, ThreadCounters)> = self
            .threads
            .iter()
            .filter(|t| ev.threads.contains_key(&t.tid))
            .map(|t| (t.tid, t.counters_since(base_hits.get(&t.tid).copied())))
            .collect();
        ev.mark_timeline(self.at_ns, &sched, &counters);
    }

    /// The largest count this reading holds (hits, losses, preemptions, switches): where a
    /// recording is read, one no session could reach is damage.
    #[must_use]
    pub fn largest_counter(&self) -> Option<u64> {
        let hits = self.threads.iter().flat_map(|t| t.hits.iter().map(|&(_, n)| n));
        let sched = self.sched.iter().flat_map(|t| [t.sched.preemptions, t.sched.voluntary_switches]);
        let preempted = self.preempted_by.iter().map(|p| p.count);
        hits.chain(sched).chain(preempted).chain(self.losses.iter().copied()).max()
    }

    /// Fold this reading into `ev`, less what `baseline` (the first reading of a segment that
    /// does not start with the session) already counted. Threads in `skip` were folded in
    /// already, from their exit records.
    pub fn apply(&self, ev: &mut Evidence, baseline: Option<&Self>, skip: &BTreeSet<u32>) {
        let base_hits: BTreeMap<u32, &ThreadHits> = baseline.map(|b| b.threads.iter().map(|t| (t.tid, t)).collect()).unwrap_or_default();
        for t in self.threads.iter().filter(|t| !skip.contains(&t.tid)) {
            ev.add_counters(t.tid, &t.counters_since(base_hits.get(&t.tid).copied()));
        }
        // Baseline lookups by key, built once: a checkpoint may list many thousands of threads.
        let base_sched: BTreeMap<u32, &SchedRaw> = baseline.map(|b| b.sched.iter().map(|t| (t.tid, &t.sched)).collect()).unwrap_or_default();
        let base_at = baseline.map_or(0, |b| b.at_ns);
        for t in self.sched.iter().filter(|t| !skip.contains(&t.tid)) {
            let mut stats = t.sched.closed_at(self.at_ns);
            if let Some(b) = base_sched.get(&t.tid) {
                stats = stats.since(&b.closed_at(base_at));
            }
            ev.sched.entry(t.tid).or_default().merge(&stats);
        }
        let base_preempt: BTreeMap<u32, u64> = baseline.map(|b| b.preempted_by.iter().map(|q| (q.tid, q.count)).collect()).unwrap_or_default();
        ev.preempted_by = self
            .preempted_by
            .iter()
            .map(|p| Preemptor { count: p.count.saturating_sub(base_preempt.get(&p.tid).copied().unwrap_or(0)), ..p.clone() })
            .filter(|p| p.count > 0)
            .collect();
        let base_cgroups: BTreeMap<&str, CpuStat> =
            baseline.map(|b| b.cgroups.iter().map(|(p, s)| (p.as_str(), *s)).collect()).unwrap_or_default();
        ev.cgroups = self
            .cgroups
            .iter()
            .map(|(path, s)| (path.clone(), s.since(&base_cgroups.get(path.as_str()).copied().unwrap_or_default())))
            .collect();
        let base_wakes = baseline.map(|b| b.wakes.as_slice()).unwrap_or_default();
        ev.wakes = self
            .wakes
            .iter()
            .map(|w| {
                let before = base_wakes.iter().find(|b| b.matches(w.tid, w.waker_pid, w.stack_id, w.in_cuda));
                let mut w = w.clone();
                if let Some(b) = before {
                    w.count = w.count.saturating_sub(b.count);
                    w.ns = w.ns.saturating_sub(b.ns);
                    w.blocked_ns = w.blocked_ns.saturating_sub(b.blocked_ns);
                }
                w
            })
            .filter(|w| w.count > 0)
            .collect();
        let base_stacks = baseline.map(|b| b.stacks.as_slice()).unwrap_or_default();
        ev.stacks = self
            .stacks
            .iter()
            .map(|s| {
                let mut s = s.clone();
                if let Some(b) = base_stacks.iter().find(|b| b.same_key(&s)) {
                    s.count = s.count.saturating_sub(b.count);
                    s.ns = s.ns.saturating_sub(b.ns);
                    s.launch_ages = s.launch_ages.since(&b.launch_ages);
                }
                s
            })
            .filter(|s| s.count > 0)
            .collect();
        let base_allocs = baseline.map(|b| b.alloc_stacks.as_slice()).unwrap_or_default();
        ev.alloc_stacks = self
            .alloc_stacks
            .iter()
            .map(|s| base_allocs.iter().find(|b| b.same_key(s)).map_or_else(|| s.clone(), |b| s.since(b)))
            .filter(|s| s.count > 0 || s.failed > 0)
            .collect();
        ev.block_sites.clone_from(&self.block_sites);
    }

    /// A thread's accounting at this reading, closed at its time.
    #[must_use]
    pub fn sched_of(&self, tid: u32) -> Option<SchedStats> {
        self.sched.iter().find(|t| t.tid == tid).map(|t| t.sched.closed_at(self.at_ns))
    }

    /// A thread's counters at this reading.
    #[must_use]
    pub fn hits_of(&self, tid: u32) -> Option<&ThreadHits> {
        self.threads.iter().find(|t| t.tid == tid)
    }

    /// Loss counters less the baseline's.
    #[must_use]
    pub fn losses_since(&self, baseline: Option<&Self>) -> [u64; gputrace_common::loss::COUNT as usize] {
        let mut out = [0; gputrace_common::loss::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let before = baseline.and_then(|b| b.losses.get(i)).copied().unwrap_or(0);
            *slot = self.losses.get(i).copied().unwrap_or(0).saturating_sub(before);
        }
        out
    }

    /// Counters of a thread that exited, less this baseline's.
    #[must_use]
    pub fn exited_counters(baseline: Option<&Self>, tid: u32, c: &ThreadCounters) -> ThreadCounters {
        ThreadHits::of(tid, c).counters_since(baseline.and_then(|b| b.hits_of(tid)))
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::host::state;

    use super::*;

    fn hits(tid: u32, launches: u64) -> ThreadHits {
        ThreadHits { tid, tgid: 1, hits: vec![(1, launches)] }
    }

    fn sched(tid: u32, state: u32, since_ns: u64, on_cpu: u64) -> ThreadTime {
        ThreadTime { tid, sched: SchedRaw { tgid: 1, state, since_ns, spent_ns: [on_cpu, 0, 0, 0], ..SchedRaw::default() } }
    }

    #[test]
    fn a_segment_counts_only_what_happened_in_it() {
        let first = Snapshot { at_ns: 1_000, threads: vec![hits(7, 100)], sched: vec![sched(7, state::RUNNING, 500, 200)], ..Snapshot::default() };
        let last = Snapshot { at_ns: 3_000, threads: vec![hits(7, 250)], sched: vec![sched(7, state::RUNNING, 500, 200)], ..Snapshot::default() };
        let mut ev = Evidence::default();
        last.apply(&mut ev, Some(&first), &BTreeSet::new());
        assert_eq!(ev.threads[&7].hits[1], 150);
        // Running since 500: 200 + 500 by the first reading, 200 + 2500 by the last.
        assert_eq!(ev.sched[&7].on_cpu_ns, 2_000);
    }

    #[test]
    fn from_the_session_start_everything_counts_and_skipped_threads_do_not() {
        let last = Snapshot { at_ns: 3_000, threads: vec![hits(7, 250), hits(8, 5)], losses: vec![0, 3], ..Snapshot::default() };
        let mut ev = Evidence::default();
        last.apply(&mut ev, None, &BTreeSet::from([8]));
        assert_eq!(ev.threads[&7].hits[1], 250);
        assert!(!ev.threads.contains_key(&8));
        assert_eq!(last.losses_since(None)[1], 3);
    }
}
