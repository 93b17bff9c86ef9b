//! The sweep's JSON shape, `gputrace.sweep/1` (docs/sweep.md). Field names are a contract
//! (docs/contract.md): add freely, rename nothing.

use serde::{Deserialize, Serialize};

use crate::Tool;

/// The value of `schema` in every sweep report.
pub const SCHEMA: &str = "gputrace.sweep/1";

/// One sweep: every process that holds or used a GPU during the window, the idle holders
/// named in diagnoses, NVML's devices, and gputrace's own cost.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SweepReport {
    /// Always `gputrace.sweep/1`.
    pub schema: String,
    /// The program that wrote the report, and its version.
    pub tool: Tool,
    /// How long the sweep watched and what stopped it.
    pub window: Window,
    /// Rogue holders first (zombie, idle), then the rest; most memory first within a state.
    pub processes: Vec<Process>,
    /// One `idle-gpu-holder` diagnosis per idle or zombie holder that can be blamed, in the
    /// order of `processes`.
    pub diagnoses: Vec<Diagnosis>,
    /// NVML's view; null where NVML is unavailable.
    pub gpu: Option<Gpu>,
    /// gputrace's own cost, and what it could not see.
    pub tracer: Tracer,
}

/// The time the sweep watched CUDA calls.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Window {
    /// How long the window lasted, seconds.
    pub duration_s: f64,
    /// `duration` or `signal`.
    pub stopped_by: String,
    /// Whether CUDA calls were counted (probes loaded); false in the `/proc`-only view.
    pub cuda_probes: bool,
}

/// One process that holds a GPU or called CUDA during the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Process {
    /// Host pid (not a thread id).
    pub pid: u32,
    /// User name, or the uid as a number where it has no name; `?` if unknown.
    pub user: String,
    /// Real uid of the owner; null where `/proc` could not be read.
    pub uid: Option<u32>,
    /// The command line, or `comm` where it is hidden (`command_hidden`) or there is none.
    pub command: String,
    /// Whether another user's command line is withheld (shown only to root or with
    /// `--show-commands`).
    pub command_hidden: bool,
    /// The kernel's short name (15 bytes at most).
    pub comm: String,
    /// `active`, `idle`, `zombie`, `worker`, `exited` or `unknown` (docs/sweep.md).
    pub state: String,
    /// The `/proc` state letter at the end (R, S, D, Z, …); null once exited.
    pub process_state: Option<String>,
    /// Parent pid from `/proc`; null where its entry could not be read.
    pub parent: Option<u32>,
    /// State `worker`: the GPU job (its parent or an ancestor) it works for.
    #[serde(default)]
    pub worker_of: Option<u32>,
    /// Its parent is init (pid 1): its own parent exited.
    pub orphaned: bool,
    /// The cgroup path (the v2 line, else the first v1 line); null where unreadable.
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
    /// Synchronize calls in the window; null where CUDA calls were not counted.
    pub syncs: Option<u64>,
    /// Memory copies (all directions) in the window; null where CUDA calls were not counted.
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
    /// Shares of the window by what the launching threads were doing.
    pub time: JobTime,
    /// What the launching threads slept in at the polls when all slept outside CUDA calls,
    /// shares of those polls; null without such a poll.
    pub sleep: Option<SleepSplit>,
    /// Kernel and graph launches a second over `window_s`.
    pub launches_per_s: f64,
    /// Synchronize calls a second over `window_s`.
    pub syncs_per_s: f64,
    /// Threads that launched kernels or synchronized (the critical path's).
    pub threads: usize,
    /// Its loader workers, their mean share of time on a CPU, and the share of polls that
    /// found them on the disk (uninterruptible sleep).
    pub workers: usize,
    /// Mean share of time its loader workers' main threads spent on a CPU (0..1); 0 without
    /// workers.
    pub workers_on_cpu: f64,
    /// Share of the polls of the job's children that found one in uninterruptible sleep (`D`),
    /// 0..1.
    #[serde(default)]
    pub workers_on_disk: f64,
    /// NVML on its GPU (0..1): the share of time a kernel ran, and of SMs busy (GPM).
    pub gpu_utilization: Option<f64>,
    /// GPM's SM activity on its GPU (0..1, Hopper and later); null where NVML gave none.
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
    /// Any other wait channel, or one that could not be read.
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
    /// One sentence on what the job does and what it costs.
    pub summary: String,
    /// What to change to remove the bottleneck.
    pub fix: String,
}

/// A process's use of one GPU, as NVML lists it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuUse {
    /// NVML's device index.
    pub index: u32,
    /// The device's UUID (`GPU-…`); empty if NVML did not give it.
    pub uuid: String,
    /// GPU memory NVML says it holds on this device; null where NVML withholds the figure.
    pub memory_bytes: Option<u64>,
    /// Highest SM utilization (percent) NVML sampled for it since the window began; null
    /// without per-process samples.
    pub sm_util_pct: Option<u32>,
}

/// A process's CUDA calls during the window, by kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cuda {
    /// Kernel launches.
    pub kernels: u64,
    /// CUDA graph launches.
    pub graphs: u64,
    /// Memset calls.
    pub memsets: u64,
    /// Seconds spent inside synchronizing calls.
    pub sync_wait_s: f64,
    /// Bytes moved by memory copies, all directions together.
    pub copy_bytes: u64,
    /// Device memory allocations.
    pub allocs: u64,
    /// Device memory frees.
    pub frees: u64,
    /// Device memory allocated in the window and still held at its end (memory allocated
    /// before the window is not seen by the probes: see `gpu_memory_bytes`).
    pub allocated_in_window_bytes: u64,
    /// Context calls in the order seen, the first 16 at most.
    pub contexts: Vec<ContextCall>,
    /// Every probed call, all kinds together.
    pub calls: u64,
}

/// One context call (create, retain, destroy, …) seen in the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextCall {
    /// The driver function called (`cuDevicePrimaryCtxRetain`, …).
    pub symbol: String,
    /// The calling thread's id (a tid, not a pid).
    pub tid: u32,
    /// Seconds from the window's start.
    pub at_s: f64,
    /// The `CUresult` it returned, 0 on success.
    pub result: u64,
}

/// A diagnosis of the sweep: a process that holds a GPU without using it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Diagnosis {
    /// `idle-gpu-holder`.
    pub id: String,
    /// `high`, `medium` or `low` (docs/sweep.md, "Diagnosis `idle-gpu-holder`").
    pub severity: crate::severity::Severity,
    /// Fraction of its GPU's memory it blocks, where NVML says; else null.
    pub impact: Option<f64>,
    /// The process's host pid.
    pub pid: u32,
    /// Its owner, as in its row.
    pub user: String,
    /// Its command line, as in its row (hidden likewise).
    pub command: String,
    /// Its state: `idle` or `zombie`.
    pub state: String,
    /// GPU memory it holds per NVML, as in its row; null where unknown.
    pub gpu_memory_bytes: Option<u64>,
    /// One sentence naming the pid, user and command and what it holds.
    pub summary: String,
    /// The signs it holds a GPU, its age and its container, one sentence each.
    pub evidence: Vec<String>,
    /// Whom to ask to free the GPU.
    pub fix: String,
}

/// NVML's view of the host's GPUs at the end of the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gpu {
    /// Always true: without NVML the whole `gpu` is null.
    pub available: bool,
    /// The NVIDIA driver's version; null where NVML would not say.
    pub driver_version: Option<String>,
    /// Every device NVML lists, by index.
    pub devices: Vec<GpuDevice>,
}

/// One GPU as NVML sees it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuDevice {
    /// NVML's device index.
    pub index: u32,
    /// The device's UUID (`GPU-…`).
    pub uuid: String,
    /// The product name (`NVIDIA H100 80GB HBM3`, …).
    pub name: String,
    /// Total device memory; null where NVML would not say.
    pub memory_total_bytes: Option<u64>,
    /// Device memory in use by all processes; null where NVML would not say.
    pub memory_used_bytes: Option<u64>,
    /// Processes NVML lists on it.
    pub processes: usize,
    /// Mean share of the window some kernel ran (the driver's samples), and GPM's SM
    /// activity (Hopper and later), percent; null where NVML could not be sampled.
    #[serde(default)]
    pub utilization_pct: Option<f64>,
    /// GPM's SM activity over the window, percent (Hopper and later); null where unavailable.
    #[serde(default)]
    pub sm_activity_pct: Option<f64>,
    /// Mean board power over the window, watts; null where NVML could not be sampled.
    #[serde(default)]
    pub power_w: Option<f64>,
}

/// gputrace's own cost and completeness.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tracer {
    /// CPU time gputrace itself used, whole run (user + system), and the two parts.
    pub cpu_s: f64,
    /// User CPU time of gputrace, seconds.
    pub user_cpu_s: f64,
    /// System CPU time of gputrace, seconds.
    pub system_cpu_s: f64,
    /// Peak resident memory of gputrace.
    pub max_rss_bytes: u64,
    /// Wall time of the `/proc` scans, all passes together, and how many passes.
    pub proc_scan_ms: f64,
    /// How many `/proc` passes were made.
    pub proc_scans: u32,
    /// Processes looked at over all passes, those whose entries we may not read, and file
    /// descriptors resolved.
    pub processes_scanned: u64,
    /// Processes whose entries could not be read (another user's without root, a protected init).
    pub processes_unreadable: u64,
    /// File descriptor links resolved over all passes.
    pub fds_read: u64,
    /// Milliseconds from start to all probes armed.
    pub attach_ms: f64,
    /// The libcuda files the probes were attached to; empty where no probe was loaded.
    pub libraries: Vec<Library>,
    /// Probed CUDA calls on the whole host during the window: each cost the caller one
    /// uprobe trap (about 1 µs, docs/benchmarks.md).
    pub probe_hits: u64,
    /// Records lost during the window (ring full, maps full, or undecodable); counts are exact
    /// when 0.
    pub lost_events: u64,
    /// Other users' processes were invisible (`/proc` mounted with `hidepid` and gputrace
    /// not root): the sweep saw only the caller's own. Not `complete` then.
    #[serde(default)]
    pub processes_hidden: bool,
    /// True when nothing was lost and no process was hidden.
    pub complete: bool,
    /// What could not be seen, in sentences.
    pub notes: Vec<String>,
}

/// A libcuda file the probes were attached to.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Library {
    /// Its path as found (a mapping of a process, or the loader path).
    pub path: String,
    /// Its inode, which tells copies of the same path in different containers apart.
    pub inode: u64,
    /// How many of its symbols were probed.
    pub symbols: usize,
}
