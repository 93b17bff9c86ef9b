//! What the detectors share: the job's time account (one partition of the window over the
//! threads on its critical path, `evidence::time_account`), rates, the loader workers, and what
//! the GPU said about itself.
//!
//! Every problem's impact is a disjoint part of that one partition, so the impacts of the
//! problems found add up to at most 1 (unit test: `impacts_add_up_to_at_most_one`). Figures
//! taken each from the thread where they are largest would charge a PyTorch job, split
//! across the Python and autograd threads, twice for one second.

use crate::{
    evidence::{time_account::TimeAccount, Evidence},
    model::GpuDevice,
};

/// The figures every detector reads: the time account, rates, the loader workers and NVML's
/// view of the job's device, computed once per analysis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Account {
    /// Seconds of the window the rates are over: its active time, pauses (and a start-up left
    /// out) excluded; the whole window where there is no time account.
    pub window_s: f64,
    /// Launches per second, whole traced tree: kernel launches and graph replays, each a call
    /// the host makes (a replay hands the GPU a whole graph; JAX's steps are all replays).
    pub launch_rate: f64,
    /// Of those, graph replays per second.
    pub graph_rate: f64,
    /// Synchronizing calls per second on the thread that synchronizes most.
    pub sync_rate: f64,
    /// Where the critical path's time went; None when no thread launched kernels.
    pub time: Option<TimeAccount>,
    /// Loader workers and whether scheduler evidence exists; None without it.
    pub host: Option<HostTime>,
    /// NVML: mean fraction of time a kernel ran, and of SM time busy (Hopper GPM), on the
    /// device the job uses; None without NVML.
    pub gpu_util: Option<f64>,
    /// NVML: mean share of SM time busy (0..1, Hopper GPM) on the job's device; None without it.
    pub sm_active: Option<f64>,
    /// What a pinned copy moves per second over that device's PCIe link (NVML); None
    /// without NVML or where it did not describe the link.
    pub bus_bytes_per_s: Option<f64>,
    /// Active NVLink links of that device (NVML); None where NVML did not say.
    pub nvlinks: Option<u32>,
}

/// A process of the tree that ran, blocked or waited for a CPU less than this fraction of the
/// window is not counted as a worker.
const ACTIVE_WORKER: f64 = 0.05;

/// The other processes of the tree (DataLoader workers), from scheduler evidence.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostTime {
    /// How many other processes of the tree were active (the loader's workers).
    pub workers: usize,
    /// Their mean share of the window on a CPU.
    pub workers_on_cpu: f64,
    /// The largest share of the window one of them spent blocked (uninterruptible, I/O).
    pub workers_blocked: f64,
    /// The largest share of the window one of them spent runnable, waiting for a CPU.
    pub workers_runqueue: f64,
}

impl HostTime {
    fn new(ev: &Evidence, window_ns: u64) -> Option<Self> {
        if ev.sched.is_empty() || window_ns == 0 {
            return None;
        }
        let w = window_ns as f64;
        let cuda_pids: std::collections::BTreeSet<u32> =
            ev.threads.values().filter(|t| t.hits.iter().any(|&h| h > 0)).map(|t| t.pid).collect();
        let mut h = Self::default();
        // Workers: processes of the tree that made no CUDA call; a process's figure is its
        // busiest thread's.
        let mut per_worker: std::collections::BTreeMap<u32, (f64, f64, f64)> = std::collections::BTreeMap::new();
        for s in ev.sched.values().filter(|s| !cuda_pids.contains(&s.pid)) {
            let e = per_worker.entry(s.pid).or_default();
            e.0 = e.0.max(s.on_cpu_ns as f64 / w);
            e.1 = e.1.max(s.blocked_ns as f64 / w);
            e.2 = e.2.max(s.runqueue_ns as f64 / w);
        }
        // An idle child (a helper process that did nothing) is no loader worker; nor is one
        // whose stacks show no data loading and that never woke a CUDA thread with input (a
        // compiler's worker pool, a library probing the machine at import: on the H200 such a
        // process, busy on CPU while Lightning started, was taken for a starved loader).
        let input_wakers = crate::evidence::waits::input_wakers(&ev.wakes, |w| cuda_pids.contains(&w.pid));
        per_worker.retain(|pid, (on_cpu, blocked, runqueue)| *on_cpu + *blocked + *runqueue >= ACTIVE_WORKER && may_load_input(ev, *pid, &input_wakers));
        h.workers = per_worker.len();
        if h.workers > 0 {
            h.workers_on_cpu = per_worker.values().map(|v| v.0).sum::<f64>() / h.workers as f64;
            h.workers_blocked = per_worker.values().map(|v| v.1).fold(0.0, f64::max);
            h.workers_runqueue = per_worker.values().map(|v| v.2).fold(0.0, f64::max);
        }
        Some(h)
    }
}

/// Whether process `pid` may be a loader worker: it is one of `input_wakers` (it woke a CUDA
/// process's thread through a pipe or socket often enough, `waits::input_wakers`), or its
/// stacks show data loading, or it has no stacks to say otherwise (`--no-stacks`).
fn may_load_input(ev: &Evidence, pid: u32, input_wakers: &std::collections::BTreeSet<u32>) -> bool {
    let mut stacks = ev.stacks.iter().filter(|s| s.pid == pid).peekable();
    input_wakers.contains(&pid) || stacks.peek().is_none() || stacks.any(|s| crate::stacks::sites::is_data_loading(&s.frames))
}

/// `utilization.gpu` at or above which the GPU counts as busy when GPM is not available.
/// docs/facts.md: 91–100 % for GPU-bound jobs, 3–11 % for launch-bound or starved ones.
pub const UTIL_BUSY: f64 = 0.85;
/// GPM SM activity at or above which the GPU counts as busy. `utilization.gpu` only says
/// "some kernel ran": on the GPU machine a job filling buffers between allocations read 87 %
/// utilization with 8 % SM activity, while GPU-bound jobs read 81–94 % SM activity
/// (docs/validation.md; docs/facts.md: 83–95 %).
pub const SM_BUSY: f64 = 0.60;

impl Account {
    /// The `sleeping` bucket split by what woke the threads (`evidence::waits`): the share of
    /// the window asleep on a timer, and the share asleep waiting for something else. Without
    /// waker evidence (an older kernel or recording) all of it is the latter.
    #[must_use]
    pub fn sleep_shares(&self) -> (f64, f64) {
        let sleeping = self.share(|t| t.sleeping_ns);
        let timer = self.time.as_ref().and_then(TimeAccount::sleep_split).map_or(0.0, |s| s[TIMER]);
        (sleeping * timer, sleeping * (1.0 - timer))
    }
}

/// Index of the timer in `WaitKind::ALL`.
const TIMER: usize = 2;
const _: () = assert!(matches!(crate::evidence::waits::WaitKind::ALL[TIMER], crate::evidence::waits::WaitKind::Timer));

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

    /// The share of time a kernel ran (0..1): NVML's utilization, else GPM's SM activity. The
    /// question "was the GPU waiting?" is about time, not about how full the SMs were.
    #[must_use]
    pub fn gpu_time_busy(&self) -> Option<f64> {
        self.gpu_util.or(self.sm_active)
    }

    /// The best measure of how much of the GPU worked (0..1), if NVML answered.
    #[must_use]
    pub fn gpu_activity(&self) -> Option<f64> {
        self.sm_active.or(self.gpu_util)
    }
}

impl Account {
    /// The account of the window from `start_ns` (monotonic ns) for `window_ns`, with NVML's view
    /// of the job's device where `gpu` has it.
    #[must_use]
    pub fn new(ev: &Evidence, start_ns: u64, window_ns: u64, gpu: Option<&[GpuDevice]>) -> Self {
        let time = super::startup::account(ev, start_ns, start_ns + window_ns);
        // Pauses are left out: seconds and rates are of the active time.
        let active_ns = time.as_ref().map_or(window_ns, |t| t.window_ns);
        let seconds = active_ns as f64 / 1e9;
        let per_s = |n: u64| if active_ns == 0 { 0.0 } else { n as f64 / seconds };
        // Counted from the end of the start-up, where one was left out.
        let startup = time.as_ref().and_then(|t| t.startup.as_ref());
        let kernels: u64 = ev.threads.values().map(crate::evidence::ThreadStats::kernel_launches).sum::<u64>().saturating_sub(
            startup.map_or(0, |s| s.mark.threads.iter().map(|t| t.kernels).sum()),
        );
        // The start-up's mark counts kernel launches only; replays in it are few (a capture's
        // warm-up), so they are counted with the loop's.
        let graphs: u64 = ev.threads.values().map(crate::evidence::ThreadStats::graph_launches).sum();
        let syncs = ev.threads.iter().map(|(tid, t)| t.syncs.saturating_sub(startup.map_or(0, |s| s.syncs_before(*tid)))).max().unwrap_or(0);
        let device = gpu.and_then(job_device);
        Self {
            window_s: seconds,
            launch_rate: per_s(kernels.saturating_add(graphs)),
            graph_rate: per_s(graphs),
            sync_rate: per_s(syncs),
            time,
            host: HostTime::new(ev, window_ns),
            gpu_util: device.and_then(|d| d.utilization.as_ref()).map(|u| u.mean / 100.0),
            sm_active: device.and_then(|d| d.sm_activity_pct.as_ref()).map(|u| u.mean / 100.0),
            bus_bytes_per_s: device.and_then(bus_bytes_per_s),
            nvlinks: device.and_then(|d| d.nvlinks_active),
        }
    }

    /// A share of the window from the time account (0 without one).
    #[must_use]
    pub fn share(&self, part: impl Fn(&TimeAccount) -> u64) -> f64 {
        self.time.as_ref().map_or(0.0, |t| t.fraction(part(t)))
    }

    /// Host time blocked while the GPU worked: synchronize waits and copy calls, less what
    /// the copies cost by their own doing (staging, transfers).
    #[must_use]
    pub fn waiting_for_gpu_work(&self) -> f64 {
        self.share(|t| {
            (t.waiting_on_gpu_ns + t.in_copies_ns)
                .saturating_sub(t.copy_transfer_waits_ns + t.pageable_staging_ns + t.sync_copy_transfer_ns)
        })
    }

    /// How much of the window the GPU worked, at least: NVML's utilization, else the time the
    /// host waited for GPU work (the GPU was busy then, and maybe more).
    #[must_use]
    pub fn gpu_busy_at_least(&self) -> f64 {
        self.gpu_util.unwrap_or_else(|| self.waiting_for_gpu_work())
    }

    /// Of the host work after synchronizes (`host_while_queue_empty`), the part that removing
    /// the syncs could hide behind GPU work: no more than the GPU's busy time. The rest is
    /// host work the GPU could not have overlapped (`host-bound`).
    #[must_use]
    pub fn sync_hideable(&self) -> f64 {
        self.share(|t| t.host_while_queue_empty_ns).min(self.gpu_busy_at_least())
    }

    /// The most of the window a host-side fix can give back: the time no kernel ran (NVML's
    /// utilization; GPM's SM activity only where utilization is missing), or all of it
    /// without NVML. Time, not occupancy: tiny kernels that leave the SMs nearly empty still
    /// take their time, and no host fix makes the step shorter than the GPU's own work.
    #[must_use]
    pub fn gpu_idle_cap(&self) -> f64 {
        self.gpu_util.or(self.sm_active).map_or(1.0, |a| (1.0 - a).clamp(0.0, 1.0))
    }
}

/// The device the job runs on: one where it holds memory, else the only one, else the
/// busiest (NVML and CUDA may number devices differently, and inside a container NVML's
/// pids are not ours).
#[must_use]
pub fn job_device(devices: &[GpuDevice]) -> Option<&GpuDevice> {
    let util = |d: &GpuDevice| d.utilization.as_ref().map_or(0.0, |u| u.mean);
    let holding = devices.iter().filter(|d| d.target_memory_bytes.unwrap_or(0) > 0).max_by(|a, b| util(a).total_cmp(&util(b)));
    holding.or_else(|| devices.iter().max_by(|a, b| util(a).total_cmp(&util(b))))
}

/// The pinned-copy rate of the job's link: its maximum, or the link as it ran under load
/// where NVML read it lower (a link trained down moves less, and no host fix beats that).
fn bus_bytes_per_s(d: &crate::model::GpuDevice) -> Option<f64> {
    let (gen, width) = (d.pcie_max_gen?, d.pcie_max_width?);
    let (gen, width) = d.pcie_under_load.map_or((gen, width), |l| (l.gen.min(gen), l.width.min(width)));
    crate::evidence::cost::pcie_bytes_per_s(gen, width)
}


