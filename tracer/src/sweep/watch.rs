//! Watching the GPU jobs' threads from one window to the next, for their judgements (`job`):
//! each thread's scheduler counters at the window's start, what the launching threads sleep
//! in at each poll, and each job's recent windows.
//!
//! Cost: one `stat` and one `wchan` read per launching thread per poll (five a second), and
//! one `schedstat` read per thread of each active job and per loader worker at each window's
//! end. Threads of jobs that were not active are not read: a job that starts working is
//! judged from its second window.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use gputrace_common::ThreadCounters;

use super::{
    activity::CudaActivity,
    job::{self, JobWindow, ThreadWindow, WaitSamples},
    model::{GpuDevice, Process},
    sched::{self, SchedStat},
};

/// How much older than the window a worker without counters may read and still be taken
/// as forked during it (`JobWatch::workers`): a few clock ticks.
const FORKED_SLACK_S: f64 = 0.05;

#[derive(Debug, Default)]
pub struct JobWatch {
    /// Each watched thread's counters when the window started: thread → (process, counters).
    start: BTreeMap<u32, (u32, SchedStat)>,
    /// Processes all of whose threads were read then: a thread of theirs without counters
    /// then was created since, so all its time is the window's.
    whole: BTreeSet<u32>,
    /// This window's polls, by process.
    samples: BTreeMap<u32, WaitSamples>,
    /// This window's polls of each process's children (its loader workers): how many were
    /// looked at, and how many were in uninterruptible sleep (the disk).
    children: BTreeMap<u32, (u32, u32)>,
    /// Each active job's recent windows, oldest first.
    recent: BTreeMap<u32, VecDeque<JobWindow>>,
}

impl JobWatch {
    /// Start from the threads of `pids` (when the probes are armed: every holder).
    pub fn begin(&mut self, pids: impl Iterator<Item = u32>) {
        for pid in pids {
            self.read_threads(pid, true);
        }
    }

    fn read_threads(&mut self, pid: u32, all: bool) {
        let tids = if all { sched::threads(pid) } else { vec![pid] };
        if all {
            self.whole.insert(pid);
        }
        for tid in tids {
            if let Some(s) = sched::schedstat(pid, tid) {
                self.start.insert(tid, (pid, s));
            }
        }
    }

    /// One poll: what each process's launching threads are doing now. A thread inside a
    /// probed call (`counters`, the kernel's, in call epoch `epoch`) is busy with CUDA
    /// whatever it sleeps in.
    pub fn poll(&mut self, activity: &CudaActivity, counters: &[(u32, ThreadCounters)], epoch: u32) {
        // The host's whole counter map is read at each poll; only the launching threads matter.
        let in_call: BTreeMap<u32, bool> =
            counters.iter().filter(|(tid, _)| activity.launching.contains_key(tid)).map(|(tid, c)| (*tid, c.in_call(epoch))).collect();
        let mut by_process: BTreeMap<u32, Vec<Option<sched::Wait>>> = BTreeMap::new();
        for (&tid, &pid) in &activity.launching {
            // A thread that is gone is left out of the poll.
            let Some((state, wchan)) = sched::now(pid, tid) else { continue };
            let wait = if in_call.get(&tid).copied().unwrap_or(false) { None } else { sched::classify(state, &wchan) };
            by_process.entry(pid).or_default().push(wait);
        }
        for (pid, waits) in by_process {
            self.samples.entry(pid).or_default().add(&waits);
            let polled = self.children.entry(pid).or_default();
            for child in sched::children(pid) {
                if let Some((state, _)) = sched::now(child, child) {
                    polled.0 += 1;
                    polled.1 += u32::from(state == 'D');
                }
            }
        }
    }

    /// Judge every active process of the window that ended (`span_ns` long), over its recent
    /// windows; then take the counters the next window starts from.
    pub fn judge(&mut self, span_ns: u64, activity: &CudaActivity, processes: &mut [Process], devices: &[GpuDevice]) {
        let mut samples = std::mem::take(&mut self.samples);
        let mut children = std::mem::take(&mut self.children);
        let mut recent = std::mem::take(&mut self.recent);
        let (end, whole) = Self::read_end(processes);
        for i in 0..processes.len() {
            if processes[i].state != "active" {
                continue;
            }
            let pid = processes[i].pid;
            let Some(mut window) = self.window(span_ns, activity, pid, &end) else { continue };
            window.samples = samples.remove(&pid).unwrap_or_default();
            (window.worker_polls, window.worker_polls_disk) = children.remove(&pid).unwrap_or_default();
            window.polls = activity.polls;
            window.polls_calling = activity.polls_calling.get(&pid).copied().unwrap_or(0);
            let calls = activity.calls.get(&pid).copied().unwrap_or_default();
            window.launches = calls.kernels + calls.graphs;
            window.syncs = calls.syncs;
            self.workers(&mut window, processes, pid, &end);
            let (utilization, sm) = gpu_of(&processes[i], devices);
            window.set_gpu(utilization, sm);
            let windows = recent.entry(pid).or_default();
            windows.push_back(window);
            // Keep the windows of the last `ROLLING_NS`, and the newest one whatever its length.
            while windows.len() > 1 && windows.iter().skip(1).map(|w| w.span_ns).sum::<u64>() >= job::ROLLING_NS {
                windows.pop_front();
            }
            let mut sum = JobWindow::default();
            for w in windows.iter() {
                sum.add(w);
            }
            processes[i].judgement = job::judge(&sum);
        }
        // Only the jobs active now carry their past into the next window.
        recent.retain(|pid, _| processes.iter().any(|p| p.pid == *pid && p.state == "active"));
        self.recent = recent;
        self.start = end;
        self.whole = whole;
    }

    /// The counters at the window's end of every thread of the active processes and of the
    /// workers' main threads.
    fn read_end(processes: &[Process]) -> (BTreeMap<u32, (u32, SchedStat)>, BTreeSet<u32>) {
        let mut end = Self::default();
        for p in processes {
            match p.state.as_str() {
                "active" => end.read_threads(p.pid, true),
                "worker" => end.read_threads(p.pid, false),
                _ => {}
            }
        }
        (end.start, end.whole)
    }

    /// The window of `pid`'s launching threads that have counters at both ends; None if none has.
    fn window(&self, span_ns: u64, activity: &CudaActivity, pid: u32, end: &BTreeMap<u32, (u32, SchedStat)>) -> Option<JobWindow> {
        let timed = activity.timed.get(&pid);
        let inside = |of: fn(&super::activity::Timed) -> &BTreeMap<u32, u64>, tid: u32| timed.and_then(|t| of(t).get(&tid)).copied().unwrap_or(0);
        let threads: Vec<ThreadWindow> = activity
            .launching_threads(pid)
            .filter_map(|tid| {
                let before = match self.start.get(&tid) {
                    Some((p, s)) if *p == pid => *s,
                    // Created during the window.
                    _ if self.whole.contains(&pid) => SchedStat::default(),
                    _ => return None,
                };
                let (_, after) = end.get(&tid)?;
                Some(ThreadWindow {
                    sched: after.since(before),
                    gpu_wait_ns: inside(|t| &t.gpu_wait_by_thread, tid),
                    copy_ns: inside(|t| &t.copy_wait_by_thread, tid),
                })
            })
            .collect();
        (!threads.is_empty()).then(|| JobWindow::new(span_ns, &threads))
    }

    /// Its workers' time over the window (their main threads, which do the loading).
    fn workers(&self, window: &mut JobWindow, processes: &[Process], pid: u32, end: &BTreeMap<u32, (u32, SchedStat)>) {
        for w in processes.iter().filter(|w| w.worker_of == Some(pid)) {
            let Some((_, after)) = end.get(&w.pid) else { continue };
            let before = match self.start.get(&w.pid) {
                Some((_, s)) => *s,
                // Forked during the window (a loader starting its workers): all its time is the
                // window's. Ages count in clock ticks (10 ms): one forked as the window began
                // can read a little older than the window.
                None if w.age_s.is_some_and(|age| age < window.span_ns as f64 / 1e9 + FORKED_SLACK_S) => SchedStat::default(),
                None => continue,
            };
            let d = after.since(before);
            window.workers += 1;
            window.worker_span_ns += window.span_ns;
            window.workers_on_cpu_ns += d.on_cpu_ns.min(window.span_ns);
            window.workers_runqueue_ns += d.runqueue_ns.min(window.span_ns);
        }
    }
}

/// NVML's utilization and SM activity (0..1) of the GPUs a process uses (its own GPUs by
/// NVML's process list, or the only GPU there is), the busiest one's.
fn gpu_of(p: &Process, devices: &[GpuDevice]) -> (Option<f64>, Option<f64>) {
    let used: Vec<&GpuDevice> = if p.gpus.is_empty() && devices.len() == 1 {
        devices.iter().collect()
    } else {
        devices.iter().filter(|d| p.gpus.iter().any(|g| g.index == d.index)).collect()
    };
    let max = |f: fn(&GpuDevice) -> Option<f64>| used.iter().filter_map(|d| f(d)).map(|v| v / 100.0).reduce(f64::max);
    (max(|d| d.utilization_pct), max(|d| d.sm_activity_pct))
}
