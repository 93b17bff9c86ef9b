//! Reading the kernel's cumulative counters into a [`Snapshot`] (at the end of every session,
//! and every second while recording), and the recording's checkpoint built around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gputrace_common::{SampleKey, SampleStats};

use crate::{
    discover::{cgroup, kallsyms::KernelSymbols, process},
    evidence::{
        snapshot::{Preemptor, SchedRaw, Snapshot, ThreadHits, ThreadTime},
        waits::{self, Relation, Wake},
        blocks::Blocks, AllocStats, Evidence,
    },
    probes::{AttachedLibrary, ProbeSet},
    record::format::{Checkpoint, LibraryRecord},
    stacks::{alloc::AllocStack, copied::is_interned, native::NativeSymbolizer, python_reader::PythonSampler, Activity, LaunchAges, Origin, StackTime},
};

/// Set on an allocation stack's id in the symbolizer's cache, whose sampled stacks' ids come
/// from another map (`probes::ProbeSet::alloc_stack`); stack ids are below 2^32.
const ALLOC_STACK_KEY: i64 = 1 << 40;

/// Reads snapshots; remembers the cgroup counters at the start (throttling is reported as its
/// increase over the window), who each preempting thread was (looked up once), and what it
/// learnt about wakeups: each thread's process, the processes of the tree, and each waker
/// stack's frames (symbolized once).
#[derive(Debug)]
pub struct SnapshotReader {
    root: u32,
    cgroups_before: BTreeMap<String, cgroup::CpuStat>,
    names: HashMap<u32, (Option<u32>, String)>,
    thread_pids: HashMap<u32, u32>,
    tree: BTreeSet<u32>,
    kernel_symbols: Option<KernelSymbols>,
    stacks: HashMap<i64, Vec<String>>,
    /// User stacks of the traced threads, symbolized while their processes live.
    native: Box<NativeSymbolizer>,
    /// Python frames of the CUDA processes that are CPython (None with `--no-stacks`).
    python: Option<PythonSampler>,
    python_followed: BTreeSet<u32>,
    /// Allocation stacks symbolized so far (`symbolize_alloc_stacks`).
    alloc_stacks_seen: usize,
    /// Processes seen allocating: their mappings were read at their first allocation.
    allocating: std::collections::HashSet<u32>,
}

impl SnapshotReader {
    pub fn new(kernel: &ProbeSet, root: u32) -> Self {
        Self {
            root,
            cgroups_before: cgroup::snapshot(&kernel.traced_processes()),
            names: HashMap::new(),
            thread_pids: HashMap::new(),
            tree: BTreeSet::new(),
            kernel_symbols: None,
            stacks: HashMap::new(),
            native: Box::default(),
            python: kernel.stacks_wanted.then(|| PythonSampler::start(kernel.threads_map_id(), kernel.python_read_map_id(), kernel.python_threads_map_id(), kernel.call_epoch())),
            python_followed: BTreeSet::new(),
            alloc_stacks_seen: 0,
            allocating: std::collections::HashSet::new(),
        }
    }

    /// Read the Python frames of every process that has mapped a CUDA driver library (the
    /// processes that launch work), once each.
    pub fn follow_cuda_processes(&mut self, kernel: &ProbeSet) {
        let Some(python) = &self.python else { return };
        for library in kernel.attached_libraries() {
            for pid in library.mapped_by {
                if self.python_followed.insert(pid) {
                    python.follow(pid);
                }
            }
        }
    }

    /// Symbolize the stacks sampled since the last call while their processes live (a
    /// stack first read after its process exited is named from its remembered mappings).
    pub fn symbolize_new_stacks(&mut self, kernel: &ProbeSet, samples: &[(SampleKey, SampleStats)]) {
        for (key, _) in samples {
            self.native.frames(key.tgid, key.stack_id, || kernel.user_stack(key.stack_id));
        }
    }

    /// Keep each traced process's executable mappings fresh (at most once a second), for
    /// its stacks read after it exits: those sampled since, and allocation stacks.
    pub fn refresh_mappings(&mut self, kernel: &ProbeSet) {
        for pid in kernel.traced_processes() {
            self.native.refresh_mappings(pid);
        }
    }

    /// Remember the executable mappings of each process that allocated, as soon as it does.
    /// Allocation stacks are symbolized at snapshots (the end, and recording checkpoints), not
    /// during the session: loading a program's DWARF there held up the drain long enough for
    /// a short job to exit before its copies were classified from its live memory map. A
    /// process gone by then (an allocation that failed is often its last act) is symbolized
    /// from these mappings. Only reads `/proc/PID/maps`, once per new process.
    pub fn note_allocating_processes(&mut self, allocs: &AllocStats) {
        if allocs.by_stack.len() == self.alloc_stacks_seen {
            return;
        }
        self.alloc_stacks_seen = allocs.by_stack.len();
        for &(pid, _, _) in allocs.by_stack.keys() {
            if self.allocating.insert(pid) {
                self.native.remember_mappings(pid);
            }
        }
    }

    /// Process `pid` exec'd: its mappings as read before (a sampled stack of `run`'s child
    /// just before its exec reads gputrace's own image) name none of its new image's code.
    pub fn note_exec(&mut self, pid: u32) {
        self.native.forget_mappings(pid);
        self.native.remember_mappings(pid);
    }

    /// The Python reader, to be told of allocations as they come (None with `--no-stacks`).
    pub fn python(&self) -> Option<&PythonSampler> {
        self.python.as_ref()
    }

    /// Device allocations by stack: native ones from the evidence's stack ids, Python ones from
    /// the reader; cumulative.
    fn alloc_stacks(&mut self, kernel: &ProbeSet, allocs: &AllocStats) -> Vec<AllocStack> {
        let mut merged: Vec<AllocStack> = Vec::new();
        for (&(pid, tid, stack), counts) in &allocs.by_stack {
            // Allocation stack ids are of their own map: kept apart from sampled stacks' ids
            // in the symbolizer's cache.
            // Interned (unwound) stacks share one id space with the sampled ones.
            let key = if stack < 0 || is_interned(stack) { stack } else { stack | ALLOC_STACK_KEY };
            let frames = self.native.frames(pid, key, || kernel.alloc_stack(stack)).to_vec();
            let this = AllocStack {
                pid,
                tid,
                origin: Origin::Native,
                frames,
                count: counts.count,
                bytes: counts.bytes,
                failed: counts.failed,
                failed_bytes: counts.failed_bytes,
            };
            // Stack ids that symbolize alike (or not at all) are one stack.
            match merged.iter_mut().find(|m| m.same_key(&this)) {
                Some(m) => m.add(&this),
                None => merged.push(this),
            }
        }
        if let Some(python) = &self.python {
            merged.extend(python.alloc_stacks());
        }
        merged
    }

    /// What the stack readers have to say (processes they could not read).
    pub fn stack_notes(&self) -> Vec<String> {
        let mut notes = self.python.as_ref().map(PythonSampler::notes).unwrap_or_default();
        if self.native.unresolved > 0 {
            notes.push(format!(
                "{} native stacks could not be symbolized (their process had exited, or its files were unreadable): \
                 their sites are shown as addresses",
                self.native.unresolved
            ));
        }
        notes
    }

    /// Native stacks from the kernel's samples and off-CPU spells, and Python stacks from the
    /// Python reader; cumulative.
    fn stacks(&mut self, kernel: &ProbeSet) -> Vec<StackTime> {
        let mut merged: Vec<StackTime> = Vec::new();
        let mut index: HashMap<(u32, Activity, bool, i64), usize> = HashMap::new();
        for (key, stats) in kernel.samples() {
            let on_cpu = key.off_cpu == 0;
            let activity = Activity::of_probe(key.probe);
            let ns = if on_cpu { stats.count * crate::probes::cpu_sampler::PERIOD_NS } else { stats.ns };
            // One entry per thread, activity, state and stack id: the samples of a stack id
            // add up, each id symbolized once.
            let slot = *index.entry((key.tid, activity, on_cpu, key.stack_id)).or_insert_with(|| {
                let frames = self.native.frames(key.tgid, key.stack_id, || kernel.user_stack(key.stack_id)).to_vec();
                merged.push(StackTime { tid: key.tid, pid: key.tgid, activity, on_cpu, origin: Origin::Native, frames, count: 0, ns: 0, launch_ages: LaunchAges::default() });
                merged.len() - 1
            });
            if let Some(s) = merged.get_mut(slot) {
                s.count += stats.count;
                s.ns += ns;
                s.launch_ages.add(key.launch_age, stats.count);
            }
        }
        if let Some(python) = &self.python {
            merged.extend(python.stacks());
        }
        merged
    }

    /// Processes of the traced tree seen so far, exited ones included (a worker that woke
    /// the job and then exited was still one of its processes).
    pub fn learn_processes(&mut self, pids: impl IntoIterator<Item = u32>) {
        self.tree.extend(pids);
    }

    /// The wakeups counted so far, classified (`evidence::waits`).
    fn wakes(&mut self, kernel: &ProbeSet, sched: &[ThreadTime]) -> Vec<Wake> {
        let raw = kernel.wakes();
        if raw.is_empty() {
            return Vec::new();
        }
        self.tree.extend(kernel.traced_processes());
        self.tree.insert(self.root);
        for t in sched {
            self.thread_pids.insert(t.tid, t.sched.tgid);
        }
        for (tid, c) in kernel.thread_counters() {
            self.thread_pids.entry(tid).or_insert(c.tgid);
        }
        let symbols = self.kernel_symbols.get_or_insert_with(KernelSymbols::load);
        raw.into_iter()
            .map(|(key, stats)| {
                let frames = self.stacks.entry(key.stack_id).or_insert_with(|| {
                    kernel.wake_stack(key.stack_id).into_iter().filter_map(|ip| symbols.name(ip).map(str::to_owned)).collect()
                });
                let pid = self.thread_pids.get(&key.tid).copied().unwrap_or(0);
                let relation = if key.waker_tgid == 0 {
                    Relation::Idle
                } else if key.waker_tgid == pid {
                    Relation::SameProcess
                } else if self.tree.contains(&key.waker_tgid) {
                    Relation::TreeProcess
                } else {
                    Relation::OtherProcess
                };
                let names: Vec<&str> = frames.iter().map(String::as_str).collect();
                let (kind, site) = waits::classify(&names, relation, key.in_cuda != 0);
                let comm = stats.waker_comm.split(|b| *b == 0).next().unwrap_or_default();
                Wake {
                    tid: key.tid,
                    pid,
                    waker_pid: key.waker_tgid,
                    waker_tid: stats.waker_tid,
                    waker_comm: String::from_utf8_lossy(comm).into_owned(),
                    stack_id: key.stack_id,
                    in_cuda: key.in_cuda != 0,
                    kind,
                    site,
                    count: stats.count,
                    ns: stats.ns,
                    blocked_ns: stats.blocked_ns,
                }
            })
            .collect()
    }

    pub fn read(&mut self, kernel: &ProbeSet, at_ns: u64, allocs: &AllocStats, blocks: &Blocks) -> Snapshot {
        // The counters first, as close to `at_ns` (and to the ring's drain just before it)
        // as can be: a recording cut after this checkpoint ends here, and hits read after the
        // slower parts below (symbolizing stacks takes tens of milliseconds) would count
        // launches whose neighbouring calls, still in the ring, fall after the cut.
        let threads = kernel.thread_counters().iter().map(|(tid, c)| ThreadHits::of(*tid, c)).collect();
        let losses = kernel.losses().to_vec();
        let sched: Vec<ThreadTime> = kernel.sched_stats().iter().map(|(tid, s)| ThreadTime { tid: *tid, sched: SchedRaw::from(s) }).collect();
        let pids: Vec<u32> = kernel.traced_processes().into_iter().chain([self.root]).collect();
        let cgroups = cgroup::snapshot(&pids)
            .iter()
            .filter_map(|(path, after)| Some((path.clone(), after.since(self.cgroups_before.get(path)?))))
            .collect();
        let preempted_by = kernel
            .preempted_by()
            .into_iter()
            .map(|(tid, count)| {
                let (pid, command) = self.names.entry(tid).or_insert_with(|| who(tid)).clone();
                Preemptor { tid, count, pid, command }
            })
            .collect();
        let wakes = self.wakes(kernel, &sched);
        let stacks = self.stacks(kernel);
        let alloc_stacks = self.alloc_stacks(kernel, allocs);
        // The blocks made in the third quarter of the blocks' span so far and live at its end: what
        // a leak keeps piles up there and survives. The model's parameters and optimizer state,
        // made at the start and live to the end, would outweigh it, and so would the last
        // step's gradients and activations (on the H200, the planted leak's 0.5 MiB a step
        // against the last backward pass's hundreds of MiB): those were made in the last
        // quarter. The reads of the last quarter's blocks are kept for the later snapshots.
        let first = blocks.timeline.first().map_or(at_ns, |p| p.0);
        let span = at_ns.saturating_sub(first);
        let (since, survived) = (first.saturating_add(span / 2), first.saturating_add(span / 4 * 3));
        let live: Vec<(u32, u64, u64, u64)> = blocks.live().filter(|(_, _, b)| b.at_ns >= since).map(|(pid, addr, b)| (pid, addr, b.at_ns, b.bytes)).collect();
        let block_sites = self.python.as_ref().map(|py| py.block_sites(&live, survived)).unwrap_or_default();
        Snapshot {
            at_ns,
            threads,
            sched,
            preempted_by,
            cgroups,
            losses,
            wakes,
            stacks,
            alloc_stacks,
            block_sites,
        }
    }
}

/// A thread's process and command, read while it is alive (empty when it is gone).
fn who(tid: u32) -> (Option<u32>, String) {
    let stat = process::stat(tid);
    (stat.as_ref().map(|s| process::tgid_of(tid).unwrap_or(s.pid)), stat.map(|s| s.comm).unwrap_or_default())
}

#[must_use]
pub fn library_records(libraries: &[AttachedLibrary]) -> Vec<LibraryRecord> {
    libraries
        .iter()
        .map(|l| LibraryRecord {
            path: l.library.name.clone(),
            dev: l.library.dev,
            inode: l.library.inode,
            symbols: l.symbols.iter().map(|s| (*s).to_owned()).collect(),
            mapped_by: l.mapped_by.iter().copied().collect(),
            probed_late_for: l.probed_late_for.iter().copied().collect(),
            entry: l.entry.iter().map(|(s, k)| ((*s).to_owned(), *k)).collect(),
        })
        .collect()
}

#[must_use]
pub fn checkpoint(snapshot: Snapshot, kernel: &ProbeSet, evidence: &Evidence, notes: &[String], maps_reads: u64) -> Checkpoint {
    Checkpoint {
        snapshot,
        libraries: library_records(&kernel.attached_libraries()),
        notes: notes.to_vec(),
        maps_reads,
        uids: evidence.uids().collect(),
        frames_dropped: 0,
    }
}
