//! Each diagnosis names the code that causes it: the stacks of the launching threads while
//! they did what the diagnosis is about (inside syncs for `host-sync`, inside copies for the
//! copy problems, in host code for `host-bound` …), charged to call sites (`crate::stacks`).
//!
//! The stacks also settle what `host-bound` is: when most of the host time sits in data
//! loading (a DataLoader in the training process, a dataset's `__getitem__`, a decoder), the
//! job is starved of input, and the fix is loader workers.

use crate::{
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, TimeBucket},
    stacks::{
        sites::{is_data_loading, preferred, top, Wanted, FEW_STACKS},
        Activity, StackTime,
    },
};

/// Sites shown per diagnosis.
pub(super) const SITES: usize = 3;
/// `host-bound` becomes `input-starved` when at least this share of the host samples is in
/// data loading.
const LOADING_SHARE: f64 = 0.5;

/// Which stacks a diagnosis is about, by id (None: no code to name; its definition's).
fn wanted(id: DiagnosisId) -> Option<super::definition::Stacks> {
    super::diagnoses::stacks_of(id)
}

/// Fill in `sites`, and turn a `host-bound` whose host time is data loading into
/// `input-starved` (keeping one `input-starved`, the costlier).
pub fn attach(found: &mut Vec<Diagnosis>, ev: &Evidence, threads: &[u32]) {
    if ev.stacks.is_empty() {
        return;
    }
    for d in found.iter_mut() {
        if d.id == DiagnosisId::HostBound {
            let share = crate::stacks::sites::loading_share(&ev.stacks, threads);
            if share >= LOADING_SHARE {
                relabel_as_input(d, share);
            }
        }
        if let Some((activities, on_cpu)) = wanted(d.id) {
            d.sites = top(&ev.stacks, &Wanted { activities, on_cpu, tids: threads }, SITES);
            note_few_stacks(d);
        }
        if d.id == DiagnosisId::InputStarved && d.bucket != Some(TimeBucket::LaunchingAndHost) {
            name_the_workers_code(d, ev, threads);
        }
    }
    let inputs: Vec<usize> = found.iter().enumerate().filter(|(_, d)| d.id == DiagnosisId::InputStarved).map(|(i, _)| i).collect();
    // Sorted by impact already: the first is the costlier.
    for &i in inputs.iter().skip(1).rev() {
        found.remove(i);
    }
    fold_into_checkpoint(found);
}

/// Say so where the costliest site rests on few stacks: its share is then rough.
pub fn note_few_stacks(d: &mut Diagnosis) {
    if let Some(n) = d.sites.first().and_then(|s| s.stacks).filter(|&n| n < FEW_STACKS) {
        d.evidence.push(format!("its first site rests on {n} stack{} only: its share is rough", if n == 1 { "" } else { "s" }));
    }
}

/// The stacks a diagnosis is charged with, those its sites are ranked from (Python stacks
/// where a process has them); None where the diagnosis names no code.
#[must_use]
pub fn stacks_of<'a>(ev: &'a Evidence, id: DiagnosisId, threads: &'a [u32]) -> Option<Vec<&'a StackTime>> {
    let (activities, on_cpu) = wanted(id)?;
    let wanted = Wanted { activities, on_cpu, tids: threads };
    Some(preferred(&ev.stacks).filter(|s| wanted.admits(s)).collect())
}

/// The diagnoses whose code is the checkpoint's: a `torch.save` in the loop also shows as host
/// time (pickling), I/O and syncs, all at the checkpoint's line. One problem, one diagnosis:
/// those whose costliest site is the checkpoint's costliest site (for most of their time) are
/// dropped, and `checkpoint-stall` takes the larger impact.
fn fold_into_checkpoint(found: &mut Vec<Diagnosis>) {
    let Some(site) = found.iter().find(|d| d.id == DiagnosisId::CheckpointStall).and_then(|d| d.sites.first()).map(|s| s.frame.clone()) else { return };
    let same = |d: &Diagnosis| d.id != DiagnosisId::CheckpointStall && d.id != DiagnosisId::GpuBound && d.sites.first().is_some_and(|s| s.frame == site && s.share >= LOADING_SHARE);
    let largest = found.iter().filter(|d| same(d)).map(|d| d.impact).fold(0.0, f64::max);
    found.retain(|d| !same(d));
    if let Some(d) = found.iter_mut().find(|d| d.id == DiagnosisId::CheckpointStall) {
        if largest > d.impact {
            d.evidence.push(format!("the same code also shows as host time, I/O or syncs, {:.0}% of the time in all", largest * 100.0));
            d.impact = largest;
            d.severity = crate::detect::severity(largest);
        }
    }
    found.sort_by(|a, b| b.impact.total_cmp(&a.impact));
}

/// Input-starved's fix where the loader workers wait on the disk rather than compute.
const DISK_BOUND_WORKERS_FIX: &str = "the loader workers wait on the disk: overlap more reads (more workers, a larger prefetch_factor), read fewer and larger files (a packed format such as WebDataset shards or a memory-mapped array), or keep the data set on faster storage or in memory (page cache, local SSD)";

/// The loader workers' time, from the scheduler and block I/O: on the CPU, blocked (in the
/// kernel's uninterruptible sleep, a block read's wait), and what they read.
#[derive(Debug, Default)]
struct WorkerTime {
    on_cpu_ns: u64,
    blocked_ns: u64,
    sleep_ns: u64,
    reads: u64,
    read_bytes: u64,
}

impl WorkerTime {
    fn of(ev: &Evidence, loaders: &std::collections::BTreeSet<u32>) -> Self {
        let mut w = Self::default();
        for s in ev.sched.values().filter(|s| loaders.contains(&s.pid)) {
            w.on_cpu_ns += s.on_cpu_ns;
            w.blocked_ns += s.blocked_ns;
            w.sleep_ns += s.sleep_ns;
        }
        for (pid, io) in &ev.io.by_process {
            if loaders.contains(pid) {
                w.reads += io.counts.reads;
                w.read_bytes += io.counts.read_bytes;
            }
        }
        w
    }

    fn share(&self, ns: u64) -> f64 {
        let all = self.on_cpu_ns + self.blocked_ns + self.sleep_ns;
        if all == 0 {
            0.0
        } else {
            ns as f64 / all as f64
        }
    }

    /// Blocked more than on the CPU, with block reads to show for it.
    fn disk_bound(&self) -> bool {
        self.reads > 0 && self.blocked_ns > self.on_cpu_ns
    }
}

/// A training thread that waits for its input waits on the loader workers: what they compute
/// is what to make faster, so their costliest lines come first (on-CPU stacks of the traced
/// processes other than the launching threads'; Python lines where py-spy reads them), and
/// the training thread's own waiting line stays beside them.
fn name_the_workers_code(d: &mut Diagnosis, ev: &Evidence, threads: &[u32]) {
    let launching: std::collections::BTreeSet<u32> = ev.stacks.iter().filter(|s| threads.contains(&s.tid)).map(|s| s.pid).collect();
    // A loader worker is a process that woke the training thread with its input, or whose
    // stacks show it loading (a DataLoader worker's loop, a `__getitem__`, a decoder): not
    // any other process of the tree (a compiler's worker pool, a library probing the
    // machine at import).
    let woke = crate::evidence::waits::input_wakers(&ev.wakes, |w| threads.contains(&w.tid));
    let mut loaders: std::collections::BTreeSet<u32> =
        ev.stacks.iter().filter(|s| !launching.contains(&s.pid) && (woke.contains(&s.pid) || is_data_loading(&s.frames))).map(|s| s.pid).collect();
    // A worker blocked on the disk may have left hardly a stack on the CPU: the wakes name it.
    let own_pids: std::collections::BTreeSet<u32> = threads.iter().filter_map(|tid| ev.threads.get(tid).map(|t| t.pid)).collect();
    loaders.extend(woke.iter().filter(|p| !launching.contains(p) && !own_pids.contains(p)));
    // What the workers wait on decides the fix: a worker blocked on the disk is not made
    // faster by faster code (one spent 7.27 s of its window in block reads against 40 ms on
    // the CPU, and was told to make its code faster).
    let waits = WorkerTime::of(ev, &loaders);
    let disk_bound = waits.disk_bound();
    if disk_bound {
        d.evidence.push(format!(
            "the loader workers wait on the disk {:.0}% of their time and run on the CPU {:.0}% ({:.1} MB read in {} requests): the reads, not their code, are the pace",
            waits.share(waits.blocked_ns) * 100.0,
            waits.share(waits.on_cpu_ns) * 100.0,
            waits.read_bytes as f64 / 1e6,
            waits.reads
        ));
        d.fix = DISK_BOUND_WORKERS_FIX.into();
    }
    let mut workers: Vec<u32> = ev.stacks.iter().filter(|s| loaders.contains(&s.pid) && s.on_cpu).map(|s| s.tid).collect();
    workers.sort_unstable();
    workers.dedup();
    if launching.is_empty() || workers.is_empty() {
        return;
    }
    let worker_sites = top(&ev.stacks, &Wanted { activities: &[Activity::Host], on_cpu: Some(true), tids: &workers }, SITES - 1);
    let Some(hottest) = worker_sites.first() else { return };
    if !disk_bound {
        d.evidence.push(format!(
            "the loader workers spend {:.0}% of their CPU time at {} ({} stacks): that is the code to make faster, or to spread over more workers",
            hottest.share * 100.0,
            hottest.frame,
            hottest.stacks.unwrap_or(0)
        ));
    }
    if let Some(own) = d.sites.first() {
        d.evidence.push(format!("the training thread waits at {}", own.frame));
    }
    let own = d.sites.drain(..).next();
    d.sites = worker_sites.into_iter().chain(own).collect();
}

fn relabel_as_input(d: &mut Diagnosis, share: f64) {
    d.id = DiagnosisId::InputStarved;
    d.summary = format!("the training thread loads its own input between steps (data loading is {:.0}% of its host time) while the GPU waits", share * 100.0);
    d.evidence.push(format!("{:.0}% of the launching threads' host samples are in data loading (DataLoader, __getitem__, collate, decoding)", share * 100.0));
    "load in DataLoader workers: DataLoader(num_workers > 0, persistent_workers=True, pin_memory=True), so that loading overlaps the GPU's work".clone_into(&mut d.fix);
}
