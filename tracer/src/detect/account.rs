//! The time account the detectors share: where the host threads of the job spent the window,
//! and what the GPU said about itself.
//!
//! PyTorch spreads one training step over threads (the Python thread launches the forward
//! pass and syncs; autograd's device thread launches the backward pass — seen on the GPU
//! machine, docs/validation.md), so each figure is taken from the thread where it is largest:
//! that thread is on the critical path for it.

use crate::{evidence::Evidence, report::model::GpuDevice};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Account {
    pub window_s: f64,
    /// Kernel launches per second, whole traced tree.
    pub launch_rate: f64,
    /// Fraction of the window a thread was blocked in syncs and copies.
    pub waiting: f64,
    /// Fraction of the window a thread was blocked in synchronize calls alone: waiting for
    /// GPU work to finish (copy calls also stage pageable data on the host).
    pub sync_waiting: f64,
    /// Fraction of the window a thread spent inside device allocation calls (alloc, free,
    /// and the virtual-memory map and unmap calls).
    pub allocating: f64,
    /// Fraction of the window a thread's GPU queue was empty after it drained it.
    pub idle_after_sync: f64,
    /// Synchronizing calls per second on the thread that synchronizes most.
    pub sync_rate: f64,
    /// Scheduler figures of the CUDA threads (those that made any CUDA call), each the
    /// largest over them, as fractions of the window; None without scheduler evidence.
    pub host: Option<HostTime>,
    /// NVML: mean fraction of time a kernel ran, and of SM time busy (Hopper GPM), on the
    /// device the job uses; None without NVML.
    pub gpu_util: Option<f64>,
    pub sm_active: Option<f64>,
}

/// A process of the tree that ran, blocked or waited for a CPU less than this fraction of the
/// window is not counted as a worker.
const ACTIVE_WORKER: f64 = 0.05;

/// Where the launching threads' time went, by scheduler state (fractions of the window).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostTime {
    pub runqueue: f64,
    pub blocked: f64,
    /// Interruptible sleep outside CUDA calls (a CUDA wait may sleep too, so the thread's
    /// sync and copy time is taken off): waiting on a queue, a lock, a pipe. Per process the
    /// smallest over its CUDA threads — in PyTorch the Python thread sleeps while autograd's
    /// thread launches the backward pass, and that is not waiting for input — then the
    /// largest over processes.
    pub sleep_outside_cuda: f64,
    /// Whether some process has a single CUDA thread (then its sleep is unambiguous).
    pub single_cuda_thread: bool,
    /// Other processes of the tree (DataLoader workers): mean on-CPU, largest blocked and
    /// run-queue fractions, and how many there were.
    pub workers: usize,
    pub workers_on_cpu: f64,
    pub workers_blocked: f64,
    pub workers_runqueue: f64,
}

impl HostTime {
    fn new(ev: &Evidence, window_ns: u64) -> Option<Self> {
        if ev.sched.is_empty() || window_ns == 0 {
            return None;
        }
        let w = window_ns as f64;
        // The threads that feed the GPU: those that launch. (A thread that only allocated
        // or synchronized once is not on the feeding path.)
        let cuda_threads: Vec<(&u32, &crate::evidence::ThreadStats)> =
            ev.threads.iter().filter(|(_, t)| t.kernel_launches() + t.graph_launches() > 0).collect();
        let cuda_pids: std::collections::BTreeSet<u32> =
            ev.threads.values().filter(|t| t.hits.iter().any(|&h| h > 0)).map(|t| t.pid).collect();
        let mut h = Self::default();
        let mut sleep_by_pid: std::collections::BTreeMap<u32, Vec<f64>> = std::collections::BTreeMap::new();
        for (tid, t) in &cuda_threads {
            let Some(s) = ev.sched.get(tid) else { continue };
            h.runqueue = h.runqueue.max(s.runqueue_ns as f64 / w);
            h.blocked = h.blocked.max(s.blocked_ns as f64 / w);
            let outside = s.sleep_ns.saturating_sub(t.sync_wait_ns + t.copy_ns);
            sleep_by_pid.entry(t.pid).or_default().push(outside as f64 / w);
        }
        for sleeps in sleep_by_pid.values() {
            h.sleep_outside_cuda = h.sleep_outside_cuda.max(sleeps.iter().copied().fold(f64::INFINITY, f64::min));
            h.single_cuda_thread |= sleeps.len() == 1;
        }
        // Workers: processes of the tree that made no CUDA call; a process's figure is its
        // busiest thread's.
        let mut per_worker: std::collections::BTreeMap<u32, (f64, f64, f64)> = std::collections::BTreeMap::new();
        for s in ev.sched.values().filter(|s| !cuda_pids.contains(&s.pid)) {
            let e = per_worker.entry(s.pid).or_default();
            e.0 = e.0.max(s.on_cpu_ns as f64 / w);
            e.1 = e.1.max(s.blocked_ns as f64 / w);
            e.2 = e.2.max(s.runqueue_ns as f64 / w);
        }
        // An idle child (a helper process that did nothing) is no loader worker.
        per_worker.retain(|_, (on_cpu, blocked, runqueue)| *on_cpu + *blocked + *runqueue >= ACTIVE_WORKER);
        h.workers = per_worker.len();
        if h.workers > 0 {
            h.workers_on_cpu = per_worker.values().map(|v| v.0).sum::<f64>() / h.workers as f64;
            h.workers_blocked = per_worker.values().map(|v| v.1).fold(0.0, f64::max);
            h.workers_runqueue = per_worker.values().map(|v| v.2).fold(0.0, f64::max);
        }
        for f in [&mut h.runqueue, &mut h.blocked, &mut h.sleep_outside_cuda] {
            *f = f.clamp(0.0, 1.0);
        }
        Some(h)
    }
}

/// `utilization.gpu` at or above which the GPU counts as busy when GPM is not available.
/// FACTS.md: 91–100 % for GPU-bound jobs, 3–11 % for launch-bound or starved ones.
const UTIL_BUSY: f64 = 0.85;
/// GPM SM activity at or above which the GPU counts as busy. `utilization.gpu` only says
/// "some kernel ran": on the GPU machine a job filling buffers between allocations read 87 %
/// utilization with 8 % SM activity, while GPU-bound jobs read 81–94 % SM activity
/// (docs/validation.md; FACTS.md: 83–95 %).
const SM_BUSY: f64 = 0.60;

impl Account {
    /// Whether NVML says the GPU was busy (GPM where present, else utilization).
    #[must_use]
    pub fn gpu_busy(&self) -> Option<bool> {
        match (self.sm_active, self.gpu_util) {
            (Some(sm), _) => Some(sm >= SM_BUSY),
            (None, Some(u)) => Some(u >= UTIL_BUSY),
            (None, None) => None,
        }
    }

    /// The best measure of how much of the GPU worked (0..1), if NVML answered.
    #[must_use]
    pub fn gpu_activity(&self) -> Option<f64> {
        self.sm_active.or(self.gpu_util)
    }
}

fn max_fraction(ev: &Evidence, window_ns: u64, f: impl Fn(&crate::evidence::ThreadStats) -> u64) -> f64 {
    if window_ns == 0 {
        return 0.0;
    }
    ev.threads.values().map(|t| f(t) as f64 / window_ns as f64).fold(0.0, f64::max).clamp(0.0, 1.0)
}

impl Account {
    #[must_use]
    pub fn new(ev: &Evidence, window_ns: u64, gpu: Option<&[GpuDevice]>) -> Self {
        let seconds = window_ns as f64 / 1e9;
        let per_s = |n: u64| if window_ns == 0 { 0.0 } else { n as f64 / seconds };
        let kernels: u64 = ev.threads.values().map(crate::evidence::ThreadStats::kernel_launches).sum();
        let device = gpu.and_then(job_device);
        Self {
            window_s: seconds,
            launch_rate: per_s(kernels),
            waiting: max_fraction(ev, window_ns, |t| t.sync_wait_ns + t.copy_ns),
            sync_waiting: max_fraction(ev, window_ns, |t| t.sync_wait_ns),
            allocating: max_fraction(ev, window_ns, |t| t.alloc_ns),
            idle_after_sync: max_fraction(ev, window_ns, |t| t.queue_idle_ns),
            sync_rate: per_s(ev.threads.values().map(|t| t.syncs).max().unwrap_or(0)),
            host: HostTime::new(ev, window_ns),
            gpu_util: device.and_then(|d| d.utilization.as_ref()).map(|u| u.mean / 100.0),
            sm_active: device.and_then(|d| d.sm_activity_pct.as_ref()).map(|u| u.mean / 100.0),
        }
    }
}

/// The device the job runs on: one where it holds memory, else the only one, else the
/// busiest (NVML and CUDA may number devices differently, and inside a container NVML's
/// pids are not ours).
fn job_device(devices: &[GpuDevice]) -> Option<&GpuDevice> {
    let util = |d: &GpuDevice| d.utilization.as_ref().map_or(0.0, |u| u.mean);
    let holding = devices.iter().filter(|d| d.target_memory_bytes.unwrap_or(0) > 0).max_by(|a, b| util(a).total_cmp(&util(b)));
    holding.or_else(|| devices.iter().max_by(|a, b| util(a).total_cmp(&util(b))))
}
