//! Assembling the sweep report from what the stages collected (pure): one row per process
//! that holds or used a GPU, judged, with the privacy rule applied, then the diagnoses.

use std::collections::{BTreeSet, HashMap};

use super::{
    activity::{CudaActivity, Calls, Timed},
    classify::{self, Facts, State},
    model::{ContextCall, Cuda, Diagnosis, Gpu, GpuDevice, GpuUse, Process},
    holders::GpuView,
    privacy,
    scan::{self, Details, Holding},
    users,
};

/// One process to judge.
#[derive(Clone, Debug, Default)]
pub struct Candidate {
    pub pid: u32,
    /// Read at the end if it was alive, else when it was first seen; None if never readable.
    pub details: Option<Details>,
    pub alive: bool,
    pub holding: Holding,
}

/// Everything the rows are built from.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Whether CUDA calls were counted.
    pub probes: bool,
    pub activity: &'a CudaActivity,
    pub gpu: Option<&'a GpuView>,
    pub users: &'a HashMap<u32, String>,
    /// Our effective uid, and whether `--show-commands` was given.
    pub viewer: u32,
    pub show_commands: bool,
    /// Seconds since boot and ticks per second, for ages.
    pub boot: Option<(f64, f64)>,
}

/// The rows, in report order: rogue holders first, most memory first within a state; each
/// job's workers right after it.
#[must_use]
pub fn processes(inputs: &Inputs<'_>, candidates: &[Candidate]) -> Vec<Process> {
    let jobs = jobs(inputs, candidates);
    let mut rows: Vec<(State, Process)> = candidates.iter().filter_map(|c| row(inputs, c, &jobs)).collect();
    rows.sort_by(|(sa, a), (sb, b)| sa.cmp(sb).then(b.gpu_memory_bytes.cmp(&a.gpu_memory_bytes)).then(a.pid.cmp(&b.pid)));
    let (workers, mut ordered): (Vec<Process>, Vec<Process>) = rows.into_iter().map(|(_, p)| p).partition(|p| p.worker_of.is_some());
    for w in workers {
        // After its job and the job's other workers; at the end if its job has no row.
        let at = ordered.iter().rposition(|p| p.pid == w.worker_of.unwrap_or(0) || p.worker_of == w.worker_of).map_or(ordered.len(), |i| i + 1);
        ordered.insert(at, w);
    }
    ordered
}

/// The GPU jobs: processes that made CUDA calls in the window or that NVML lists. Each
/// maps to its parent, for finding the workers' jobs.
struct Jobs {
    gpu: BTreeSet<u32>,
    parent: HashMap<u32, u32>,
    command: HashMap<u32, String>,
}

/// How many generations up a worker's job may be (a DataLoader worker's own children).
const WORKER_DEPTH: usize = 3;

impl Jobs {
    /// Whether `pid` runs the same command line as `job` (a fork that did not exec).
    fn same_command(&self, pid: u32, job: u32) -> bool {
        self.command.get(&pid).is_some_and(|c| self.command.get(&job) == Some(c))
    }

    /// The nearest ancestor of `pid` that is a GPU job.
    fn of(&self, pid: u32) -> Option<u32> {
        let mut at = pid;
        for _ in 0..WORKER_DEPTH {
            at = *self.parent.get(&at)?;
            if self.gpu.contains(&at) {
                return Some(at);
            }
        }
        None
    }
}

fn jobs(inputs: &Inputs<'_>, candidates: &[Candidate]) -> Jobs {
    let a = inputs.activity;
    let gpu = candidates
        .iter()
        .filter(|c| {
            let listed = inputs.gpu.and_then(|g| g.processes.get(&c.pid)).is_some_and(|u| !u.is_empty());
            listed || a.calls.get(&c.pid).is_some_and(|calls| calls.total() > 0) || a.timed.contains_key(&c.pid)
        })
        .map(|c| c.pid)
        .collect();
    let parent = candidates.iter().filter_map(|c| Some((c.pid, c.details.as_ref()?.ppid))).collect();
    let command = candidates.iter().filter_map(|c| Some((c.pid, c.details.as_ref()?.cmdline.clone()?))).collect();
    Jobs { gpu, parent, command }
}

fn row(inputs: &Inputs<'_>, c: &Candidate, jobs: &Jobs) -> Option<(State, Process)> {
    let a = inputs.activity;
    let calls = a.calls.get(&c.pid).copied().unwrap_or_default();
    let timed = a.timed.get(&c.pid);
    let uses = inputs.gpu.and_then(|g| g.processes.get(&c.pid)).map_or(&[][..], Vec::as_slice);
    let sampled_running = uses.iter().any(|u| u.sm_util_pct.is_some_and(|s| s > 0));
    let called = calls.total() > 0 || timed.is_some();

    let mut holds = Vec::new();
    if !uses.is_empty() {
        holds.push("nvml");
    }
    if !c.holding.mapped.is_empty() {
        holds.push("device-mapped");
    }
    if !c.holding.open.is_empty() {
        holds.push("device-open");
    }
    if c.holding.libcuda {
        holds.push("libcuda");
    }
    if called {
        holds.push("cuda-calls");
    }
    if holds.is_empty() {
        return None;
    }
    let worked = if inputs.probes {
        Some(called || sampled_running)
    } else if inputs.gpu.is_some_and(|g| g.utilization_known) {
        Some(sampled_running)
    } else {
        None
    };
    let d = c.details.as_ref();
    let ppid = d.map(|d| d.ppid);
    let orphaned = ppid.is_some_and(classify::orphaned);
    let mut state = classify::classify(Facts {
        alive: c.alive,
        proc_state: d.filter(|_| c.alive).map(|d| d.state),
        worked,
        holds: holds.iter().any(|h| *h != "cuda-calls"),
        orphaned,
    });
    // A child of a GPU job that made no CUDA call and that NVML does not list inherited the
    // driver's mappings through fork: its job's worker, not a holder of its own.
    // Without NVML's lists a child could hold a context of its own (a rank started with
    // mp.spawn): only one still running its job's command line (forked, not exec'd) counts.
    let listed = inputs.gpu.is_some_and(|g| g.processes_listed);
    let worker_of = (matches!(state, State::Idle | State::Unknown) && !called && uses.is_empty())
        .then(|| jobs.of(c.pid))
        .flatten()
        .filter(|&job| listed || jobs.same_command(c.pid, job));
    if worker_of.is_some() {
        state = State::Worker;
    }
    let comm = d.map(|d| d.comm.clone()).unwrap_or_default();
    let uid = d.and_then(|d| d.uid);
    let shown = privacy::command(d.and_then(|d| d.cmdline.as_deref()), &comm, uid, inputs.viewer, inputs.show_commands);
    let gpus: Vec<GpuUse> = uses
        .iter()
        .map(|u| GpuUse {
            index: u.device,
            uuid: inputs.gpu.and_then(|g| g.devices.iter().find(|d| d.index == u.device)).map(|d| d.uuid.clone()).unwrap_or_default(),
            memory_bytes: u.memory_bytes,
            sm_util_pct: u.sm_util_pct,
        })
        .collect();
    // With NVML's lists read, a process they do not list holds no GPU memory (0); without
    // NVML, with lists unread or of another pid namespace, or where NVML withholds a figure,
    // the memory is unknown (null).
    let gpu_memory_bytes = match inputs.gpu {
        None => None,
        Some(g) if uses.is_empty() => g.processes_listed.then_some(0),
        Some(_) => uses.iter().map(|u| u.memory_bytes).sum(),
    };
    let secs = |ns: u64| ns as f64 / 1e9;
    let cuda = inputs.probes.then(|| cuda(inputs.start_ns, &calls, timed));
    let device_files: BTreeSet<String> = c.holding.mapped.iter().chain(&c.holding.open).cloned().collect();
    let process = Process {
        pid: c.pid,
        user: users::name(inputs.users, uid),
        uid,
        command: shown.command,
        command_hidden: shown.hidden,
        comm,
        state: state.name().to_owned(),
        process_state: d.filter(|_| c.alive).map(|d| d.state.to_string()),
        parent: ppid,
        worker_of,
        orphaned,
        cgroup: d.and_then(|d| d.cgroup.clone()),
        container: d.and_then(|d| d.cgroup.as_deref()).and_then(scan::container_of),
        pod: d.and_then(|d| d.cgroup.as_deref()).and_then(scan::pod_of),
        age_s: d.zip(inputs.boot).filter(|_| c.alive).map(|(d, boot)| scan::age_s(d.start_ticks, boot)),
        holds: holds.into_iter().map(str::to_owned).collect(),
        device_files: device_files.into_iter().collect(),
        gpus,
        gpu_memory_bytes,
        launches: inputs.probes.then_some(calls.kernels + calls.graphs),
        syncs: inputs.probes.then_some(calls.syncs),
        copies: inputs.probes.then_some(calls.copies),
        last_activity_s: a.last_ns.get(&c.pid).map(|&t| secs(inputs.end_ns.saturating_sub(t))),
        cuda,
        judgement: None,
    };
    Some((state, process))
}

/// The window's CUDA calls of one process in detail.
fn cuda(start_ns: u64, calls: &Calls, timed: Option<&Timed>) -> Cuda {
    let secs = |ns: u64| ns as f64 / 1e9;
    Cuda {
        kernels: calls.kernels,
        graphs: calls.graphs,
        memsets: calls.memsets,
        sync_wait_s: timed.map_or(0.0, |t| secs(t.sync_wait_ns)),
        copy_bytes: timed.map_or(0, |t| t.copy_bytes),
        allocs: calls.allocs,
        frees: calls.frees,
        allocated_in_window_bytes: timed.map_or(0, Timed::held_bytes),
        contexts: timed
            .map(|t| {
                t.contexts
                    .iter()
                    .map(|x| ContextCall {
                        symbol: x.symbol.to_owned(),
                        tid: x.tid,
                        at_s: secs(x.at_ns.saturating_sub(start_ns)),
                        result: x.result,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        calls: calls.total(),
    }
}

/// `idle-gpu-holder` for each idle or zombie holder, most memory first.
#[must_use]
pub fn diagnoses(inputs: &Inputs<'_>, processes: &[Process]) -> Vec<Diagnosis> {
    let window_s = inputs.end_ns.saturating_sub(inputs.start_ns) as f64 / 1e9;
    let total_of = |p: &Process| {
        let index = p.gpus.first()?.index;
        inputs.gpu?.devices.iter().find(|d| d.index == index)?.memory_total_bytes
    };
    processes.iter().filter_map(|p| classify::idle_gpu_holder(p, window_s, total_of(p))).collect()
}

/// NVML's view at the end, with each device's utilization and SM activity over the window
/// (`sampled`, by index; empty without the sampler).
#[must_use]
pub fn gpu(view: &GpuView, sampled: &[crate::model::GpuDevice]) -> Gpu {
    Gpu {
        available: true,
        driver_version: view.driver_version.clone(),
        devices: view
            .devices
            .iter()
            .map(|d| GpuDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_total_bytes: d.memory_total_bytes,
                memory_used_bytes: d.memory_used_bytes,
                processes: view.processes.values().filter(|uses| uses.iter().any(|u| u.device == d.index)).count(),
                utilization_pct: sampled.iter().find(|s| s.index == d.index).and_then(|s| s.utilization.as_ref()).map(|u| u.mean),
                sm_activity_pct: sampled.iter().find(|s| s.index == d.index).and_then(|s| s.sm_activity_pct.as_ref()).map(|u| u.mean),
                power_w: sampled.iter().find(|s| s.index == d.index).and_then(|s| s.power_w.as_ref()).map(|u| u.mean),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::{ThreadCounters, PROBES};

    use super::*;
    use crate::sweep::holders::{DeviceView, ProcessUse};

    fn details(uid: u32, ppid: u32, state: char) -> Details {
        Details {
            ppid,
            state,
            comm: "python".into(),
            start_ticks: 100,
            uid: Some(uid),
            cmdline: Some("python job.py --token=SECRET".into()),
            cgroup: Some("/user.slice".into()),
        }
    }

    fn candidate(pid: u32, uid: u32, libcuda: bool) -> Candidate {
        Candidate { pid, details: Some(details(uid, 77, 'S')), alive: true, holding: Holding { libcuda, ..Holding::default() } }
    }

    fn launches(tgid: u32, n: u64) -> (u32, ThreadCounters) {
        let mut c = ThreadCounters { tgid, ..ThreadCounters::ZERO };
        let id = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").map(|p| p.id).expect("probe");
        c.hits[id as usize] = n;
        (tgid, c)
    }

    fn inputs<'a>(activity: &'a CudaActivity, gpu: Option<&'a GpuView>, users: &'a HashMap<u32, String>, probes: bool) -> Inputs<'a> {
        Inputs {
            start_ns: 1_000_000_000,
            end_ns: 6_000_000_000,
            probes,
            activity,
            gpu,
            users,
            viewer: 1000,
            show_commands: false,
            boot: Some((1000.0, 100.0)),
        }
    }

    #[test]
    fn forked_children_of_a_job_are_its_workers_not_idle_holders() {
        let mut activity = CudaActivity::default();
        activity.observe(5_500_000_000, &[launches(20, 300)]);
        let users = HashMap::new();
        let input = inputs(&activity, None, &users, true);
        let child = |pid: u32, ppid: u32| Candidate { pid, details: Some(details(1000, ppid, 'S')), alive: true, holding: Holding { libcuda: true, ..Holding::default() } };
        // 21 and 22 are the job's workers, 23 a worker's own child; 40 an unrelated idle holder.
        // 24 exec'd another program: without NVML it may hold a context of its own.
        let mut spawned = child(24, 20);
        spawned.details.as_mut().expect("details").cmdline = Some("python -c from multiprocessing.spawn import spawn_main".into());
        let rows = processes(&input, &[child(21, 20), candidate(40, 1000, true), candidate(20, 1000, true), child(22, 20), child(23, 21), spawned]);
        let order: Vec<(u32, &str, Option<u32>)> = rows.iter().map(|p| (p.pid, p.state.as_str(), p.worker_of)).collect();
        assert_eq!(order, [(24, "idle", None), (40, "idle", None), (20, "active", None), (21, "worker", Some(20)), (22, "worker", Some(20)), (23, "worker", Some(20))]);
        let blamed: Vec<u32> = diagnoses(&input, &rows).iter().map(|d| d.pid).collect();
        assert_eq!(blamed, [24, 40]);
    }

    #[test]
    fn rows_are_judged_ordered_and_filtered_for_privacy() {
        let mut activity = CudaActivity::default();
        activity.observe(5_500_000_000, &[launches(20, 300)]);
        let users = HashMap::from([(1000, "me".to_owned())]);
        let input = inputs(&activity, None, &users, true);
        let rows = processes(
            &input,
            &[
                candidate(20, 1001, true),
                candidate(10, 1000, true),
                // Holds nothing and did nothing: not listed.
                candidate(30, 1000, false),
            ],
        );
        assert_eq!(rows.len(), 2);
        let (idle, busy) = (&rows[0], &rows[1]);
        assert_eq!((idle.pid, idle.state.as_str(), idle.launches), (10, "idle", Some(0)));
        assert_eq!((busy.pid, busy.state.as_str(), busy.launches), (20, "active", Some(300)));
        assert!((busy.last_activity_s.expect("seen") - 0.5).abs() < 1e-9);
        assert_eq!(idle.last_activity_s, None);
        // Without NVML, memory is unknown, not zero.
        assert_eq!(idle.gpu_memory_bytes, None);
        // My own command line is shown; another user's is not.
        assert_eq!((idle.command.as_str(), idle.command_hidden, idle.user.as_str()), ("python job.py --token=SECRET", false, "me"));
        assert_eq!((busy.command.as_str(), busy.command_hidden, busy.user.as_str()), ("python", true, "1001"));
        assert!((idle.age_s.expect("age") - 999.0).abs() < 1e-9);
        let diagnoses = diagnoses(&input, &rows);
        assert_eq!(diagnoses.len(), 1);
        assert_eq!((diagnoses[0].pid, diagnoses[0].severity.as_str()), (10, "low"));
    }

    #[test]
    fn nvml_gives_memory_and_running_samples() {
        let activity = CudaActivity::default();
        let users = HashMap::new();
        let view = GpuView {
            driver_version: Some("580".into()),
            devices: vec![DeviceView {
                index: 0,
                uuid: "GPU-1".into(),
                name: "H200".into(),
                memory_total_bytes: Some(100 << 30),
                memory_used_bytes: None,
            }],
            processes: [
                (10, vec![ProcessUse { device: 0, memory_bytes: Some(20 << 30), sm_util_pct: None }]),
                (20, vec![ProcessUse { device: 0, memory_bytes: None, sm_util_pct: Some(35) }]),
            ]
            .into(),
            utilization_known: true,
            processes_listed: true,
            unreachable: Vec::new(),
        };
        // Without probes, NVML's samples still tell the worker from the idle holder.
        let input = inputs(&activity, Some(&view), &users, false);
        let orphan = Candidate { details: Some(details(0, 1, 'S')), ..candidate(10, 0, false) };
        let rows = processes(&input, &[orphan, candidate(20, 0, false), candidate(30, 0, true)]);
        let by_pid = |pid| rows.iter().find(|p| p.pid == pid).expect("listed");
        assert_eq!((by_pid(10).state.as_str(), by_pid(10).gpu_memory_bytes), ("zombie", Some(20 << 30)));
        assert_eq!((by_pid(20).state.as_str(), by_pid(20).gpu_memory_bytes), ("active", None));
        // Not in NVML's list: it holds no GPU memory.
        assert_eq!((by_pid(30).state.as_str(), by_pid(30).gpu_memory_bytes), ("idle", Some(0)));
        assert_eq!(by_pid(10).launches, None);
        let d = diagnoses(&input, &rows);
        assert_eq!(d[0].pid, 10);
        assert_eq!(d[0].severity, "high");
        assert!((d[0].impact.expect("known") - 0.2).abs() < 1e-9);
        assert_eq!(gpu(&view, &[]).devices[0].processes, 2);
        // NVML's lists unread (or of another pid namespace): not listed says nothing.
        let unlisted = GpuView { processes_listed: false, ..view.clone() };
        let input = inputs(&activity, Some(&unlisted), &users, false);
        let rows = processes(&input, &[candidate(30, 0, true)]);
        assert_eq!(rows[0].gpu_memory_bytes, None);
    }

    #[test]
    fn unknown_activity_and_exits() {
        let activity = CudaActivity::default();
        let users = HashMap::new();
        let input = inputs(&activity, None, &users, false);
        let gone = Candidate { alive: false, ..candidate(40, 0, true) };
        let rows = processes(&input, &[candidate(30, 0, true), gone]);
        assert_eq!(rows.iter().map(|p| p.state.as_str()).collect::<Vec<_>>(), ["unknown", "exited"]);
        assert!(rows[1].process_state.is_none() && rows[1].age_s.is_none());
        assert!(diagnoses(&input, &rows).is_empty());
    }
}
