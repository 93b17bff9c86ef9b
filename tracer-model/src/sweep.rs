//! The sweep's JSON shape, `gputrace.sweep/1` (docs/sweep.md). Field names are a contract
//! (docs/contract.md): add freely, rename nothing.

use serde::{Deserialize, Serialize};

use crate::Tool;

pub const SCHEMA: &str = "gputrace.sweep/1";

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepReport {
    pub schema: String,
    pub tool: Tool,
    pub window: Window,
    /// Rogue holders first (zombie, idle), then the rest; most memory first within a state.
    pub processes: Vec<Process>,
    pub diagnoses: Vec<Diagnosis>,
    /// NVML's view; null where NVML is unavailable.
    pub gpu: Option<Gpu>,
    pub tracer: Tracer,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Window {
    pub duration_s: f64,
    /// `duration` or `signal`.
    pub stopped_by: String,
    /// Whether CUDA calls were counted (probes loaded); false in the `/proc`-only view.
    pub cuda_probes: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Process {
    pub pid: u32,
    /// User name, or the uid as a number where it has no name; `?` if unknown.
    pub user: String,
    pub uid: Option<u32>,
    /// The command line, or `comm` where it is hidden (`command_hidden`) or there is none.
    pub command: String,
    pub command_hidden: bool,
    /// The kernel's short name (15 bytes at most).
    pub comm: String,
    /// `active`, `idle`, `zombie`, `worker`, `exited` or `unknown` (docs/sweep.md).
    pub state: String,
    /// The `/proc` state letter at the end (R, S, D, Z, …); null once exited.
    pub process_state: Option<String>,
    pub parent: Option<u32>,
    /// State `worker`: the GPU job (its parent or an ancestor) it works for.
    #[serde(default)]
    pub worker_of: Option<u32>,
    /// Its parent is init (pid 1): its own parent exited.
    pub orphaned: bool,
    pub cgroup: Option<String>,
    /// A container id found in the cgroup path (12 hex digits), or null.
    pub container: Option<String>,
    /// Under Kubernetes, the pod's uid from the cgroup path, or null.
    #[serde(default)]
    pub pod: Option<String>,
    /// Seconds since the process started.
    pub age_s: Option<f64>,
    /// Why it is listed: `nvml`, `device-mapped`, `device-open`, `libcuda`, `cuda-calls`.
    pub holds: Vec<String>,
    /// NVIDIA device files it maps or has open (`nvidia0`, `nvidiactl`, …).
    pub device_files: Vec<String>,
    /// Its use of each GPU per NVML.
    pub gpus: Vec<GpuUse>,
    /// GPU memory it holds per NVML (sum over devices); null where NVML cannot say.
    pub gpu_memory_bytes: Option<u64>,
    /// Calls in the window; null where CUDA calls were not counted.
    pub launches: Option<u64>,
    pub syncs: Option<u64>,
    pub copies: Option<u64>,
    /// Seconds before the end of the window of its last CUDA call; null if none was seen.
    pub last_activity_s: Option<f64>,
    /// The window's CUDA calls in more detail; null where they were not counted.
    pub cuda: Option<Cuda>,
    /// An active job's bottleneck over its recent windows (docs/sweep.md, "Each job's
    /// judgement"); null for other states, without probes, or before a job has been watched
    /// for a whole window.
    #[serde(default)]
    pub judgement: Option<Judgement>,
}

/// Where an active job's launching threads spent their time, and what it costs the GPU.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Judgement {
    /// Seconds judged: this window and those before it, up to 30 s.
    pub window_s: f64,
    /// The costliest diagnosis's id where one takes 10 % of the time or more; else
    /// `gpu-bound` (the GPU was busy, or the host waited for it half the time or more),
    /// `paused` (its calls came in a burst and it slept most of the time since: a notebook
    /// between cells, a server between requests), or `no-bottleneck-found`.
    pub verdict: String,
    pub time: JobTime,
    /// What the launching threads slept in at the polls when all slept outside CUDA calls,
    /// shares of those polls; null without such a poll.
    pub sleep: Option<SleepSplit>,
    pub launches_per_s: f64,
    pub syncs_per_s: f64,
    /// Threads that launched kernels or synchronized (the critical path's).
    pub threads: usize,
    /// Its loader workers, their mean share of time on a CPU, and the share of polls that
    /// found them on the disk (uninterruptible sleep).
    pub workers: usize,
    pub workers_on_cpu: f64,
    #[serde(default)]
    pub workers_on_disk: f64,
    /// NVML on its GPU (0..1): the share of time a kernel ran, and of SMs busy (GPM).
    pub gpu_utilization: Option<f64>,
    pub sm_activity: Option<f64>,
    /// Costliest first.
    pub diagnoses: Vec<JobDiagnosis>,
}

/// The launching threads' time, shares of the window that add up to 1.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobTime {
    /// On a CPU outside the waits below: host code, launching included.
    pub host: f64,
    /// Inside synchronizing calls and synchronous copies.
    pub waiting_on_gpu: f64,
    /// Inside asynchronous copies (staging memory that is not pinned).
    pub in_copies: f64,
    /// Runnable, on a run queue.
    pub waiting_for_cpu: f64,
    /// Asleep outside CUDA calls, all of them at once.
    pub sleeping: f64,
}

/// Shares of the sleeping polls by what the threads slept in (`/proc` wait channels).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SleepSplit {
    /// Uninterruptible sleep (`D`).
    pub disk: f64,
    /// A pipe, socket, poll, select or epoll.
    pub input: f64,
    /// A timed sleep.
    pub timer: f64,
    /// A futex: a lock or queue of the job's own threads.
    pub thread: f64,
    pub other: f64,
}

/// One bottleneck of a job.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobDiagnosis {
    /// An `attach` diagnosis id: `input-starved`, `launch-bound`, `host-bound`, `host-sync`,
    /// `pageable-copy`, `cpu-starved`, `io-stall` or `host-sleep`.
    pub id: String,
    /// The share of the judged time it costs the GPU (0..1).
    pub ratio: f64,
    pub summary: String,
    pub fix: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuUse {
    pub index: u32,
    pub uuid: String,
    pub memory_bytes: Option<u64>,
    pub sm_util_pct: Option<u32>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cuda {
    pub kernels: u64,
    pub graphs: u64,
    pub memsets: u64,
    pub sync_wait_s: f64,
    pub copy_bytes: u64,
    pub allocs: u64,
    pub frees: u64,
    /// Device memory allocated in the window and still held at its end (memory allocated
    /// before the window is not seen by the probes: see `gpu_memory_bytes`).
    pub allocated_in_window_bytes: u64,
    pub contexts: Vec<ContextCall>,
    /// Every probed call, all kinds together.
    pub calls: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextCall {
    pub symbol: String,
    pub tid: u32,
    /// Seconds from the window's start.
    pub at_s: f64,
    pub result: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Diagnosis {
    /// `idle-gpu-holder`.
    pub id: String,
    pub severity: crate::severity::Severity,
    /// Fraction of its GPU's memory it blocks, where NVML says; else null.
    pub impact: Option<f64>,
    pub pid: u32,
    pub user: String,
    pub command: String,
    pub state: String,
    pub gpu_memory_bytes: Option<u64>,
    pub summary: String,
    pub evidence: Vec<String>,
    pub fix: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gpu {
    pub available: bool,
    pub driver_version: Option<String>,
    pub devices: Vec<GpuDevice>,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuDevice {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    /// Processes NVML lists on it.
    pub processes: usize,
    /// Mean share of the window some kernel ran (the driver's samples), and GPM's SM
    /// activity (Hopper and later), percent; null where NVML could not be sampled.
    #[serde(default)]
    pub utilization_pct: Option<f64>,
    #[serde(default)]
    pub sm_activity_pct: Option<f64>,
    /// Mean board power over the window, watts; null where NVML could not be sampled.
    #[serde(default)]
    pub power_w: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tracer {
    /// CPU time gputrace itself used, whole run (user + system), and the two parts.
    pub cpu_s: f64,
    pub user_cpu_s: f64,
    pub system_cpu_s: f64,
    /// Peak resident memory of gputrace.
    pub max_rss_bytes: u64,
    /// Wall time of the `/proc` scans, all passes together, and how many passes.
    pub proc_scan_ms: f64,
    pub proc_scans: u32,
    /// Processes looked at over all passes, those whose entries we may not read, and file
    /// descriptors resolved.
    pub processes_scanned: u64,
    pub processes_unreadable: u64,
    pub fds_read: u64,
    /// Milliseconds from start to all probes armed.
    pub attach_ms: f64,
    pub libraries: Vec<Library>,
    /// Probed CUDA calls on the whole host during the window: each cost the caller one
    /// uprobe trap (about 1 µs, docs/benchmarks.md).
    pub probe_hits: u64,
    pub lost_events: u64,
    /// Other users' processes were invisible (`/proc` mounted with `hidepid` and gputrace
    /// not root): the sweep saw only the caller's own. Not `complete` then.
    #[serde(default)]
    pub processes_hidden: bool,
    pub complete: bool,
    pub notes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Library {
    pub path: String,
    pub inode: u64,
    pub symbols: usize,
}
