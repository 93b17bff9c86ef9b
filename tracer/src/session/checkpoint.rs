//! Reading the kernel's cumulative counters into a [`Snapshot`] (at the end of every session,
//! and every second while recording), and the recording's checkpoint built around it.

use std::collections::{BTreeMap, HashMap};

use crate::{
    discover::{cgroup, process},
    evidence::{
        snapshot::{Preemptor, SchedRaw, Snapshot, ThreadHits, ThreadTime},
        Evidence,
    },
    probes::{AttachedLibrary, Kernel},
    record::format::{Checkpoint, LibraryRecord},
};

/// Reads snapshots; remembers the cgroup counters at the start (throttling is reported as its
/// increase over the window) and who each preempting thread was (looked up once).
#[derive(Debug)]
pub struct SnapshotReader {
    root: u32,
    cgroups_before: BTreeMap<String, cgroup::CpuStat>,
    names: HashMap<u32, (Option<u32>, String)>,
}

impl SnapshotReader {
    pub fn new(kernel: &Kernel, root: u32) -> Self {
        Self { root, cgroups_before: cgroup::snapshot(&kernel.traced_processes()), names: HashMap::new() }
    }

    pub fn read(&mut self, kernel: &Kernel, at_ns: u64) -> Snapshot {
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
        Snapshot {
            at_ns,
            threads: kernel.thread_counters().iter().map(|(tid, c)| ThreadHits::of(*tid, c)).collect(),
            sched: kernel.sched_stats().iter().map(|(tid, s)| ThreadTime { tid: *tid, sched: SchedRaw::from(s) }).collect(),
            preempted_by,
            cgroups,
            losses: kernel.losses().to_vec(),
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
pub fn checkpoint(snapshot: Snapshot, kernel: &Kernel, evidence: &Evidence, notes: &[String], maps_reads: u64) -> Checkpoint {
    Checkpoint {
        snapshot,
        libraries: library_records(&kernel.attached_libraries()),
        notes: notes.to_vec(),
        maps_reads,
        uids: evidence.uids.iter().map(|(p, u)| (*p, *u)).collect(),
        frames_dropped: 0,
    }
}
