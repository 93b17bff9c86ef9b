//! The report's JSON shape, `gputrace.report/1` (docs/report.md), and the sweep's,
//! `gputrace.sweep/1` (`sweep`). Field names are a contract (docs/contract.md): add freely,
//! rename nothing.
//!
//! A crate of its own so that it stays a leaf: it depends on serde and schemars alone, so a
//! report type cannot reach into a stage of the tracer (the compiler refuses the import), and
//! the stages, the sweep and the readers of recordings all fill the one set of types.

#![deny(missing_docs)]

pub mod severity;
pub mod sweep;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The value of `schema` in every report.
pub const SCHEMA: &str = "gputrace.report/1";

/// One session's report, `gputrace.report/1`: the JSON object `gputrace attach|run --json`
/// prints, and `gputrace report FILE` makes from a recording (`docs/report.md`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Report {
    /// Always `gputrace.report/1`.
    pub schema: String,
    /// The program that wrote the report, and its version.
    pub tool: Tool,
    /// When tracing began (RFC 3339, UTC).
    #[serde(default)]
    pub started_at: String,
    /// The host name of the machine traced (`/proc/sys/kernel/hostname`); empty where it could
    /// not be read.
    #[serde(default)]
    pub host: String,
    /// The traced process, the command it runs and the process tree seen under it.
    pub target: Target,
    /// How long tracing lasted, what ended it, and its active, paused, start-up and outside
    /// stretches.
    pub window: Window,
    /// CUDA driver evidence: launches, copies, memsets, syncs, allocations and per-thread figures.
    pub cuda: Cuda,
    /// Scheduler evidence of the traced tree: the main thread, the busiest threads, who
    /// preempted them and cgroup throttling.
    pub cpu: Cpu,
    /// Block I/O of the traced tree; null until scheduler and block tracing are enabled.
    pub io: Option<Io>,
    /// NVML view; null where NVML is unavailable.
    pub gpu: Option<Gpu>,
    /// The headline, as a diagnosis id: the problem whose fix buys the most if that is at least
    /// `medium`, else `gpu-bound` where found, else the largest problem whose fix buys at least
    /// 3 %, else `no-bottleneck-found`; `no-cuda-work` where no CUDA driver call was seen.
    pub verdict: DiagnosisId,
    /// Every problem found, ranked by what its fix buys; the memory diagnoses come after the
    /// others.
    pub diagnoses: Vec<Diagnosis>,
    /// Where the main thread's wall time went; null when no thread launched kernels.
    pub time_account: Option<TimeAccountReport>,
    /// How long the GPU was known to be idle, and what NVML says; null when no thread
    /// launched kernels.
    pub gpu_idle: Option<GpuIdle>,
    /// Training steps found from the job's rhythm, and figures per step; null when none.
    pub steps: Option<Steps>,
    /// The model of the step the savings are simulated on (docs/report.md, `step_model`);
    /// null when no thread launched kernels.
    #[serde(default)]
    pub step_model: Option<StepModel>,
    /// Where the GPU memory is: what the job reserved through the driver, what NVML says it
    /// holds, over time (docs/report.md, "memory").
    #[serde(default)]
    pub memory: Option<Memory>,
    /// NCCL as the job's ranks used it (docs/report.md, "nccl"); null where no traced
    /// process called it.
    #[serde(default)]
    pub nccl: Option<Nccl>,
    /// Completeness and cost of the trace: lost events, probes, notes, overhead.
    pub tracer: Tracer,
}

/// NCCL, all ranks together and each apart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Nccl {
    /// Collective and point-to-point calls, all ranks.
    pub calls: u64,
    /// Host time in the waits that drained a queue after a collective, all ranks: an upper
    /// bound on the collectives' own time (the device work queued before them is in it).
    pub wait_s: f64,
    /// By kind: `allreduce`, `allgather`, `reducescatter`, `broadcast`, `reduce`, `send`,
    /// `recv`.
    pub by_op: BTreeMap<String, NcclOp>,
    /// Every process that called NCCL, by rank.
    pub ranks: Vec<NcclRank>,
    /// True where the calls were only counted, not recorded (return probes off:
    /// `--entry-only`, or chosen where a seccomp filter would kill at a return): `calls`,
    /// each kind's `count` and each rank's `calls` and `launches` are exact; bytes, waits,
    /// times, ranks' numbers and shares are unknown (0 or null), and no multi-GPU diagnosis
    /// is made. Absent where false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted_only: bool,
}

/// One kind of collective, all ranks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclOp {
    /// Calls of this kind, all ranks.
    pub count: u64,
    /// Each call's count times its datatype's size, summed: the buffers the calls name.
    pub bytes: u64,
    /// The waits charged to this kind (`wait_s`).
    pub wait_s: f64,
    /// Host time inside the calls themselves.
    pub call_s: f64,
}

/// One rank: a process that called NCCL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NcclRank {
    /// The rank's process id.
    pub pid: u32,
    /// From its communicator's set-up (`ncclCommInitRank`); null where that came before the
    /// trace began.
    pub rank: Option<u64>,
    /// The number of ranks in that communicator; null where its set-up was not seen.
    pub world_size: Option<u64>,
    /// `LOCAL_RANK` from its environment; null where unknown.
    pub local_rank: Option<u32>,
    /// The device the rank is taken to use, as `CUDA_VISIBLE_DEVICES` names it (an index or a
    /// UUID), or `LOCAL_RANK` itself where that variable names none; null where unknown.
    pub gpu: Option<String>,
    /// The rank's collective and point-to-point calls.
    pub calls: u64,
    /// The bytes those calls name, each call's count times its datatype's size.
    pub bytes: u64,
    /// Kernel and graph launches by the rank's threads.
    pub launches: u64,
    /// Shares of the rank's own time account (its launching threads, as `time_account` is
    /// the job's): waiting for the GPU after collectives, inside NCCL calls, and its host
    /// phase (everything but waiting for the GPU). Null without an account (no launches).
    pub wait_share: Option<f64>,
    /// Share of the rank's time inside NCCL calls (0..1); null without an account.
    pub in_calls_share: Option<f64>,
    /// Share of the rank's time in its host phase, everything but waiting for the GPU (0..1);
    /// null without an account.
    pub host_share: Option<f64>,
    /// The rank's own verdict: what most of its host phase was, as a diagnosis id
    /// (`input-starved`, `host-bound`, `cpu-starved`, `io-stall`, `host-sleep`, `pageable-copy`,
    /// `blocking-copy`, `alloc-churn`), or `gpu-bound` where it mostly waits for the GPU.
    pub verdict: Option<DiagnosisId>,
    /// That bucket's share of the rank's time.
    pub verdict_share: Option<f64>,
}

/// GPU memory of the traced processes: reserved through the driver's allocation calls (what
/// a caching allocator asked for, not what its tensors use) and held as NVML counts it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Memory {
    /// Reserved through traced allocation calls and not freed, at the end and at most.
    pub reserved_bytes: u64,
    /// The most reserved at any moment of the window, in bytes.
    pub peak_reserved_bytes: u64,
    /// NVML: what the traced processes hold on their GPUs at the end (null without NVML).
    pub held_bytes: Option<u64>,
    /// `held − reserved`: what the driver holds for the context itself (its code, the
    /// runtime's and libraries' workspaces); null without NVML or when tracing began after the
    /// job's context (its earlier reservations are then in `held` only).
    pub context_bytes: Option<u64>,
    /// The total memory of the GPUs the traced processes hold memory on (null without NVML).
    pub device_total_bytes: Option<u64>,
    /// The session saw the job create its context, so every reservation was traced.
    pub from_start: bool,
    /// Steady growth of the reservations over the second half of the window (null: none).
    pub growth_bytes_per_s: Option<f64>,
    /// The same growth per step, where the window's steps are known (absent in reports made
    /// before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_bytes_per_step: Option<f64>,
    /// Allocations that failed for lack of memory.
    pub out_of_memory: u64,
    /// Failed requests the job made again successfully after freeing memory (a caching
    /// allocator's retry).
    pub recovered_by_retry: u64,
    /// Failed requests the job never got: it went on to other sizes, asked again only later, or
    /// never did.
    pub failed_for_good: u64,
    /// One point a second (at most): reserved and NVML-held bytes.
    pub timeline: Vec<MemoryPoint>,
    /// The framework's caching allocator, where its functions were probed (absent without
    /// them: memory is then seen at the driver level only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<TensorMemory>,
}

/// Memory at the tensor level: the blocks a caching allocator (PyTorch's) handed out from the
/// segments it reserved, from its own functions' probes (`gputrace_common::ALLOCATOR_SYMBOLS`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TensorMemory {
    /// Bytes in blocks handed out while traced and not given back, at the end and at most.
    pub allocated_bytes: u64,
    /// The most bytes live in such blocks at any moment while traced.
    pub peak_allocated_bytes: u64,
    /// Blocks handed out and given back while traced.
    pub blocks: u64,
    /// Blocks given back while traced, `unknown_frees` among them.
    pub frees: u64,
    /// Gives back of blocks handed out before tracing began (their size unknown): with
    /// these, `allocated_bytes` counts only the window's own blocks, not all the job holds.
    pub unknown_frees: u64,
    /// The allocator's own figures at its last report (`torch.cuda.memory_allocated()` and
    /// `memory_reserved()`, summed over the job's processes and devices): whole, whenever
    /// tracing began.
    pub allocator_allocated_bytes: u64,
    /// The allocator's reserved total at its last report (`memory_reserved()`), in bytes.
    pub allocator_reserved_bytes: u64,
    /// `allocator_reserved − allocator_allocated`: cached memory no tensor uses.
    pub cached_bytes: u64,
    /// Seconds into the window when `--max-overhead` took the allocator's probes off for
    /// good: the figures are of the window up to then (absent: on throughout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_s: Option<f64>,
    /// The live blocks by size, a power of two apart (`[from_bytes, 2 × from_bytes)`), the
    /// smallest first; sizes with none are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub live_by_size: Vec<BlockSizes>,
}

/// Live blocks of one size class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlockSizes {
    /// The class's lower edge: its blocks hold from this many bytes to twice as many.
    pub from_bytes: u64,
    /// Live blocks in the class.
    pub blocks: u64,
    /// Their bytes, summed.
    pub bytes: u64,
}

/// One point of `memory.timeline`, at the end of its interval (a second; longer in a window
/// of over an hour).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MemoryPoint {
    /// Seconds since the window began.
    pub t_s: f64,
    /// Bytes reserved through traced allocation calls and not freed at that moment.
    pub reserved_bytes: u64,
    /// NVML's reading for the traced processes (null where none was taken in that second).
    pub held_bytes: Option<u64>,
    /// Bytes in live tensors at that moment: the caching allocator's blocks handed out while
    /// traced and not given back (absent without `--tensors`, or before its first report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_bytes: Option<u64>,
}

/// The GPU's idle time: a lower bound from the host's side, checked against NVML.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuIdle {
    /// Time the GPU queue was known to be empty (from a synchronize's or synchronous D→H
    /// copy's return to the next launch) on the threads of the time account.
    pub lower_bound_s: f64,
    /// `lower_bound_s` as a share of the active time (`window.active_s`), 0..1.
    pub lower_bound_fraction: f64,
    /// 1 − NVML's mean `utilization.gpu` (time no kernel ran); null without NVML.
    pub nvml_idle_fraction: Option<f64>,
    /// Whether the lower bound is within NVML's idle time (with a tolerance for sampling);
    /// null without NVML.
    pub consistent: Option<bool>,
}

/// The job's training steps, found from the rhythm of a call it makes once a step.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Steps {
    /// The recurring call taken as one per step.
    pub marker: String,
    /// How many of those markers were kept (the most recent, at most 4096).
    pub markers: usize,
    /// Share of step times within 25% of the median.
    pub on_beat: f64,
    /// Steps per second (1 / mean step time).
    pub per_second: f64,
    /// The intervals between consecutive markers, seconds: mean, median and 95th percentile.
    pub step_time_s: StepTime,
    /// Figures of the active time (`window.active_s`) divided by its number of steps.
    pub per_step: PerStep,
}

/// Step times (intervals between markers), seconds.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepTime {
    /// The mean interval between markers, seconds.
    pub mean: f64,
    /// The median interval, seconds.
    pub p50: f64,
    /// The 95th percentile interval, seconds.
    pub p95: f64,
}

/// Figures of the window divided by its steps: the active time (`window.active_s`, less a
/// start-up the account leaves out) over `step_time_s.mean`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PerStep {
    /// Kernel and graph launches by the time account's threads.
    pub launches: f64,
    /// Synchronizing calls by the time account's threads.
    pub syncs: f64,
    /// Bytes the traced tree copied host to device, per step.
    pub h2d_bytes: f64,
    /// Bytes the traced tree copied device to host, per step.
    pub d2h_bytes: f64,
    /// The time account's `sleeping`: waiting for input.
    pub input_wait_s: f64,
    /// The time account's `waiting_on_gpu`.
    pub gpu_wait_s: f64,
}

/// A partition of the window for the main (launching) thread: the fractions add up to 1.
// The report's form of the analysis's `evidence::time_account::TimeAccount`, named apart so
// that the two are not taken for each other; the schema keeps its name.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[schemars(rename = "TimeAccount")]
pub struct TimeAccountReport {
    /// The main thread: the one that launched the most kernels.
    pub tid: u32,
    /// The active time (`window.active_s`), seconds: what every fraction here is of.
    pub window_s: f64,
    /// Bucket name → seconds and fraction of the window, in a fixed order.
    pub buckets: Vec<Bucket>,
    /// The threads accounted for: the main thread first, then the threads of its process that
    /// take turns with it on the critical path.
    pub threads: Vec<u32>,
    /// Whether those threads ran at once (their active time exceeded the window) and the
    /// buckets were scaled down alike.
    pub concurrent: bool,
    /// Parts of buckets that diagnoses are charged with: `{name, bucket, seconds, fraction}`.
    pub parts: Vec<Part>,
    /// Off-CPU time of these threads by what woke them, seconds (pauses excluded):
    /// `input_worker`, `thread`, `timer`, `disk`, `network`, `gpu`, `other`
    /// (docs/report.md). Empty without waker evidence.
    #[serde(default)]
    pub waits: BTreeMap<String, f64>,
    /// The wakeups behind `waits`, most time first (at most 8).
    #[serde(default)]
    pub wakers: Vec<Waker>,
}

/// One kind of wakeup of an accounted thread.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Waker {
    /// A `waits` key.
    pub kind: String,
    /// Off-CPU time these wakeups ended, seconds.
    pub seconds: f64,
    /// How many wakeups of this kind.
    pub count: u64,
    /// The woken thread.
    pub tid: u32,
    /// Who woke it: `pid N (command)`, or `an interrupt`.
    pub waker: String,
    /// The kernel function on the waker's path that tells how (`pipe_write`, `futex_wake`).
    pub site: String,
}

/// The step model (`detect::whatif`): the critical path's host time as serial segments, the
/// GPU's busy time, and what each fix makes of them.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepModel {
    /// `step` where steps were found (the shares are of a step), else `window` (of the active
    /// window).
    pub basis: String,
    /// The seconds the shares are of: the mean step time, or the active window.
    pub time_s: f64,
    /// Host segments with a share above zero: `name` (`launch`, `user`, `staging`,
    /// `transfer`, `alloc`, `cpu_wait`, `io_wait`, `input_wait`, `timer`) and `phase`: `idle`
    /// (after a queue-draining call, the GPU has nothing to run), `overlap` (the GPU may work
    /// meanwhile) or `serial` (copy work after a drain, which the GPU runs after its own).
    pub segments: Vec<StepSegment>,
    /// Share blocked waiting for queued GPU work.
    pub gpu_wait: f64,
    /// The GPU's busy time as a share, `[low, point, high]`.
    pub gpu_busy: [f64; 3],
    /// Where `gpu_busy` comes from: `nvml` (its utilization, rescaled to the active time) or
    /// `structure` (no NVML: bounded by the host's waits for the GPU and its empty-queue spells).
    pub gpu_source: String,
    /// Of the host time, the share that is launching and dispatch, `[low, point, high]`.
    pub launching: [f64; 3],
    /// Where `launching` comes from: `stacks` (on-CPU samples of the launching threads) or
    /// `launch-cost` (no stacks: launches times an eager launch's host cost).
    pub launching_source: String,
    /// Cores the job may use (affinity, cgroup quota); null where unknown.
    pub cpus: Option<f64>,
    /// Cores the traced tree's threads kept busy on average over the whole window (pauses and
    /// start-up included).
    pub job_cpu: f64,
    /// The two fixes that buy the most together; null with fewer than two.
    pub best_pair: Option<FixPair>,
    /// What makes the estimates uncertain.
    pub notes: Vec<String>,
}

/// One host segment of the step model (`step_model.segments`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepSegment {
    /// What the time is: `launch`, `user`, `staging`, `transfer`, `alloc`, `cpu_wait`, `io_wait`,
    /// `input_wait` or `timer`.
    pub name: String,
    /// When it happens: `idle` (after a queue-draining call, the GPU has nothing to run),
    /// `overlap` (the GPU may work meanwhile) or `serial` (copy work after a drain, before the
    /// GPU's next work).
    pub phase: String,
    /// Its share of the step, or of the active window where no steps were found
    /// (`step_model.basis`), 0..1.
    pub fraction: f64,
}

/// The two fixes that buy the most applied together (`step_model.best_pair`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FixPair {
    /// The two diagnoses whose fixes are combined.
    pub ids: [DiagnosisId; 2],
    /// Today's step time over the step time with both fixes, simulated on the step model.
    pub speedup: f64,
    /// `[low, high]`: the speed-ups the evidence allows.
    pub range: [f64; 2],
    /// What limits the step after both fixes: `gpu`, `cores`, `launch-rate`, `input`, `host` or
    /// `bus`.
    pub bound: String,
    /// Steps per second with both fixes, where steps were found.
    pub steps_per_s_after: Option<f64>,
}

/// A stretch of the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Phase {
    /// Where the stretch begins, seconds from the window's start.
    pub start_s: f64,
    /// Where it ends, seconds from the window's start.
    pub end_s: f64,
    /// `active`, `paused`, `startup` (the job's start-up: from the stretch's start to where
    /// its steps kept their beat; left out like a pause) or `outside` (before the launching
    /// threads began their work or after they ended: left out of every share, like a pause).
    pub kind: String,
}

/// A part of a bucket that diagnoses are charged with (`time_account.parts`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Part {
    /// `host_while_queue_empty`, `copy_transfer_waits`, `pageable_staging` or
    /// `sync_copy_transfer` (`docs/report.md`, "Parts").
    pub name: String,
    /// The bucket it lies in.
    pub bucket: TimeBucket,
    /// Its time, seconds.
    pub seconds: f64,
    /// Its share of the active time, 0..1.
    pub fraction: f64,
}

/// A bucket of the time account (`time_account.buckets[].name`), in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimeBucket {
    /// On CPU in the host path: Python, the framework, the driver's launch calls.
    LaunchingAndHost,
    /// Blocked in a sync for the GPU to finish.
    WaitingOnGpu,
    /// In host↔device copies.
    InCopies,
    /// In device allocation and free calls.
    Allocating,
    /// Runnable, not running: waiting for a CPU.
    WaitingForCpu,
    /// Blocked on block I/O.
    IoWait,
    /// Off CPU for anything else (a loader, a timer, a lock).
    Sleeping,
}

impl TimeBucket {
    /// The name in words, for a person (`launching and host`).
    #[must_use]
    pub fn label(self) -> String {
        self.as_str().replace('_', " ")
    }

    /// The name the JSON reports use.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LaunchingAndHost => "launching_and_host",
            Self::WaitingOnGpu => "waiting_on_gpu",
            Self::InCopies => "in_copies",
            Self::Allocating => "allocating",
            Self::WaitingForCpu => "waiting_for_cpu",
            Self::IoWait => "io_wait",
            Self::Sleeping => "sleeping",
        }
    }
}

impl std::fmt::Display for TimeBucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One bucket of the time account (`time_account.buckets`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Bucket {
    /// Which bucket.
    pub name: TimeBucket,
    /// Its time, seconds.
    pub seconds: f64,
    /// Its share of the active time, 0..1; the buckets' fractions add up to 1.
    pub fraction: f64,
}

/// The program that wrote a report.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tool {
    /// Always `gputrace`.
    pub name: String,
    /// gputrace's version.
    pub version: String,
}

/// What was traced (`target`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Target {
    /// The traced process id: the one `--pid` named (its process where it names a thread), or
    /// the command `gputrace run` started.
    pub pid: u32,
    /// Its command line, for people.
    pub command: String,
    /// Exit code of a command started by `gputrace run` (128+signal if killed), else null.
    pub exit_code: Option<i32>,
    /// The signal that killed that command (`exit_code` is then 128 + it), else null.
    #[serde(default)]
    pub exit_signal: Option<i32>,
    /// Processes of the traced tree that were seen (the root and children it created).
    pub processes: Vec<ProcessEntry>,
    /// Whether any traced process had the CUDA driver loaded while we traced.
    pub cuda_loaded: bool,
    /// The framework its stacks show (`pytorch`, `lightning`, `hf-trainer`, `accelerate`,
    /// `deepspeed`, `vllm`, `sglang`, `jax`, `tensorflow`); absent where they show none
    /// (no stacks, or plain native code). The fixes are said in its terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<Framework>,
}

/// One process of the traced tree (`target.processes`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessEntry {
    /// The process id.
    pub pid: u32,
    /// The process that created it, where its creation was seen; null for the root and for
    /// processes that already existed when tracing began.
    pub parent: Option<u32>,
    /// How many times it called `exec` while traced.
    pub execs: u32,
    /// Whether it exited while traced.
    pub exited: bool,
}

/// The traced window (`window`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Window {
    /// The window's length, seconds.
    pub duration_s: f64,
    /// `duration`, `signal` or `target-exited`; for a file of a recording, also `rotated` (the
    /// recording went on in the next file), `recording-cut` (no end record) or `flight-dump`.
    pub stopped_by: String,
    /// The window less its pauses: what every share of the time account is of.
    #[serde(default)]
    pub active_s: f64,
    /// The window split into `active`, `paused`, `startup` and `outside` stretches; empty
    /// when it is all active.
    #[serde(default)]
    pub phases: Vec<Phase>,
}

/// CUDA driver evidence (`cuda`), from the probes on the driver library.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cuda {
    /// Kernel and graph launch calls.
    pub launches: Launches,
    /// Copies by direction.
    pub copies: Copies,
    /// Memset calls and the bytes they named.
    pub memsets: Count,
    /// Host-blocking synchronize calls (stream, context, event) and the time blocked in them.
    pub syncs: Syncs,
    /// Device memory allocation and free calls.
    pub allocs: Allocs,
    /// Pinned host allocations and registrations.
    pub host_pinned: HostPinned,
    /// Virtual-memory mappings (`cuMemMap`/`cuMemUnmap`: PyTorch's expandable segments).
    pub vmm: Vmm,
    /// Context create, retain, release and destroy calls, in the order seen.
    pub contexts: Vec<ContextCall>,
    /// Sum over threads of time between a queue-draining call's return and that thread's
    /// next launch: the GPU queue was empty then. A lower bound on GPU idle time.
    pub queue_idle_s: f64,
    /// Per thread that made CUDA calls, the most launches first.
    pub threads: Vec<ThreadEntry>,
}

/// Kernel and graph launch calls (`cuda.launches`), counted at the driver layer only.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Launches {
    /// Kernel launch calls, each counted once (driver layer).
    pub kernels: u64,
    /// Graph launch calls (`cuGraphLaunch`); the kernels inside a graph are not counted as
    /// launches.
    pub graphs: u64,
    /// Cooperative kernel launches, included in `kernels`.
    pub cooperative: u64,
    /// Kernel launches a second: `kernels` over `window.duration_s`.
    pub per_second: f64,
    /// Launches a second, graph replays included: `kernels + graphs` over
    /// `window.duration_s` (a replay is a launch the host makes; every rate in the texts
    /// counts them).
    #[serde(default)]
    pub launch_rate_per_s: f64,
    /// Whether these counts (and the per-thread and per-step ones) are estimates:
    /// `--max-overhead` took the launch probes off part of the window (`tracer.sampling`).
    #[serde(default)]
    pub estimated: bool,
}

/// Copies by direction (`cuda.copies`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Copies {
    /// Host to device.
    pub h2d: CopyDir,
    /// Device to host.
    pub d2h: CopyDir,
    /// Device to device, and 2D/3D copies whose struct could not be read (counted with 0
    /// bytes).
    pub d2d: CopyDir,
    /// Between devices, through the peer copy calls (`cuMemcpyPeer`, `cuMemcpyPeerAsync`).
    pub peer: CopyDir,
    /// Host-to-host copies made through the driver (2D/3D copies between host buffers,
    /// `cuMemcpy` between host pointers); the host side is not classified.
    pub h2h: CopyDir,
}

/// The copies of one direction (`cuda.copies.h2d`, …).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CopyDir {
    /// Copy calls.
    pub count: u64,
    /// Bytes the copy calls named.
    pub bytes: u64,
    /// Copies whose host memory is pageable (not pinned).
    pub pageable: u64,
    /// Bytes of the pageable copies.
    pub pageable_bytes: u64,
    /// Host time spent blocked inside the copy calls.
    pub blocking_s: f64,
    /// How the host side of each copy was classified.
    pub classified: CopyClassified,
    /// Calls to synchronous copy APIs.
    pub sync_api: u64,
    /// Async copies followed by a synchronize on the same thread (`non_blocking=False`,
    /// `.cpu()`), and that wait.
    pub then_synced: u64,
    /// Seconds blocked in the synchronizes that followed those copies.
    pub then_synced_wait_s: f64,
    /// Copies of at most 256 bytes to the host followed by a synchronize (`.item()`).
    pub scalar_reads: u64,
    /// Seconds blocked in the synchronizes or synchronous copies of those reads.
    pub scalar_read_wait_s: f64,
}

/// How the host side of each copy of one direction was classified; each copy counts once.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CopyClassified {
    /// Pinned by a host-allocation or registration call we traced.
    pub pinned_traced: u64,
    /// In a shared `/dev/zero (deleted)` mapping: pinned before we attached.
    pub pinned_by_map: u64,
    /// In ordinary process memory and not pinned by any call we saw.
    pub pageable: u64,
    /// Not mapped when we looked.
    pub unknown: u64,
}

/// Calls and the bytes they named (`cuda.memsets`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Count {
    /// Calls.
    pub count: u64,
    /// Bytes the calls named; for the 32-bit forms (`cuMemsetD32*`), the element count.
    pub bytes: u64,
}

/// Host-blocking synchronize calls (`cuda.syncs`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Syncs {
    /// Synchronize calls.
    pub count: u64,
    /// Host time blocked in them, seconds.
    pub wait_s: f64,
    /// The same, by driver function.
    pub by_symbol: Vec<SymbolWait>,
}

/// Synchronize calls of one driver function.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SymbolWait {
    /// The driver function (`cuStreamSynchronize`, `cuCtxSynchronize_v2`, …).
    pub symbol: String,
    /// Its calls.
    pub count: u64,
    /// Host time blocked in them, seconds.
    pub wait_s: f64,
}

/// Device memory allocation and free calls (`cuda.allocs`), all traced processes.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Allocs {
    /// Allocations that succeeded.
    pub count: u64,
    /// Frees that succeeded, including those of blocks allocated before tracing.
    pub frees: u64,
    /// Bytes allocated while tracing.
    pub bytes: u64,
    /// Bytes freed, counting only blocks allocated while tracing (an earlier block's size is
    /// unknown).
    pub freed_bytes: u64,
    /// Allocation calls that failed, for any reason.
    pub failures: u64,
    /// Of those, the ones that failed with `CUDA_ERROR_OUT_OF_MEMORY`.
    pub out_of_memory: u64,
    /// Bytes allocated while tracing and not freed by its end.
    pub live_bytes: u64,
    /// The most bytes live at any moment, over blocks allocated while tracing.
    pub peak_live_bytes: u64,
}

/// Pinned host memory calls (`cuda.host_pinned`): allocations and registrations.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostPinned {
    /// Pinning calls (allocations and registrations) that succeeded.
    pub count: u64,
    /// Bytes those calls pinned.
    pub bytes: u64,
    /// Frees and unregistrations that succeeded.
    pub frees: u64,
    /// Pinning calls that failed.
    pub failures: u64,
}

/// Virtual-memory mappings (`cuda.vmm`): how PyTorch's expandable segments grow and shrink.
/// The physical memory behind them counts in `allocs`, never twice.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Vmm {
    /// `cuMemMap` calls that succeeded.
    pub maps: u64,
    /// `cuMemUnmap` calls that succeeded.
    pub unmaps: u64,
    /// Bytes those maps mapped.
    pub mapped_bytes: u64,
    /// Bytes those unmaps unmapped.
    pub unmapped_bytes: u64,
    /// Map and unmap calls that failed.
    pub failures: u64,
    /// Host time inside map and unmap calls.
    pub call_s: f64,
}

/// One context call (`cuda.contexts`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContextCall {
    /// The driver function (`cuCtxCreate_v2`, `cuDevicePrimaryCtxRetain`, …).
    pub symbol: String,
    /// The calling process.
    pub pid: u32,
    /// The calling thread.
    pub tid: u32,
    /// The process's owner (real uid), looked up while it lived; null where unknown.
    pub uid: Option<u32>,
    /// Seconds from the start of the window.
    pub at_s: f64,
    /// Time inside the call, seconds.
    pub duration_s: f64,
    /// The `CUresult` it returned (0: success).
    pub result: u32,
}

/// One thread's CUDA calls (`cuda.threads`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadEntry {
    /// The thread id.
    pub tid: u32,
    /// Its process id.
    pub pid: u32,
    /// Kernel launches (an estimate under `--max-overhead`, as `launches.estimated` says).
    pub kernels: u64,
    /// Graph launches (an estimate under `--max-overhead`, as for `kernels`).
    pub graphs: u64,
    /// Copy calls.
    pub copies: u64,
    /// Host time inside copy calls, seconds.
    pub copy_s: f64,
    /// Synchronize calls.
    pub syncs: u64,
    /// Host time blocked in them, seconds.
    pub sync_wait_s: f64,
    /// Time from each queue-draining call's return to this thread's next launch, seconds: the
    /// GPU queue was empty then.
    pub queue_idle_s: f64,
}

/// Scheduler evidence of the traced tree (`cpu`), from the scheduler tracepoints.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Cpu {
    /// The thread that launches the most kernels.
    pub main_thread: Option<MainThread>,
    /// Threads of the traced tree by time accounted, busiest first (at most 32).
    pub threads: Vec<ThreadTime>,
    /// Who took the CPU from traced threads that were still runnable.
    pub preempted_by: Vec<Preemptor>,
    /// CPU throttling of the tree's cgroups (v2) during the window.
    pub cgroups: Vec<CgroupThrottle>,
}

/// Scheduler figures are null where scheduler tracing is unavailable (see `tracer.notes`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MainThread {
    /// The thread id.
    pub tid: u32,
    /// Time on a CPU, seconds; null without scheduler tracing.
    pub on_cpu_s: Option<f64>,
    /// Runnable but not running: waiting for a CPU.
    pub runqueue_s: Option<f64>,
    /// Uninterruptible sleep (`D`), mostly I/O.
    pub io_wait_s: Option<f64>,
    /// Interruptible sleep (`S`): locks, queues, pipes, timers.
    pub sleep_s: Option<f64>,
    /// Times it was switched out while still runnable; null without scheduler tracing.
    pub preemptions: Option<u64>,
    /// Times it gave up the CPU itself (blocking or sleeping); null without scheduler tracing.
    pub voluntary_switches: Option<u64>,
}

/// One thread's scheduler figures (`cpu.threads`), seconds in each state over the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadTime {
    /// The thread id.
    pub tid: u32,
    /// Its process id.
    pub pid: u32,
    /// Time on a CPU, seconds.
    pub on_cpu_s: f64,
    /// Runnable but not running, seconds: waiting for a CPU.
    pub runqueue_s: f64,
    /// Uninterruptible sleep (`D`), seconds: mostly I/O.
    pub io_wait_s: f64,
    /// Interruptible sleep (`S`), seconds: locks, queues, pipes, timers.
    pub sleep_s: f64,
    /// Times it was switched out while still runnable.
    pub preemptions: u64,
    /// Times it gave up the CPU itself (blocking or sleeping).
    pub voluntary_switches: u64,
}

/// A thread that took the CPU from a traced thread that was still runnable
/// (`cpu.preempted_by`: the most preemptions first, at most 16).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Preemptor {
    /// The preempting thread.
    pub tid: u32,
    /// Its process, if it still existed at the end.
    pub pid: Option<u32>,
    /// Its command, read at the end; empty if it had exited.
    pub command: String,
    /// How many times it preempted a traced thread.
    pub count: u64,
}

/// CPU throttling of one cgroup holding the traced tree, over the window (`cpu.cgroups`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CgroupThrottle {
    /// The cgroup's `cpu.stat` file.
    pub path: String,
    /// Enforcement periods of its CPU quota in the window (`nr_periods`).
    pub periods: u64,
    /// Of them, the periods in which it was throttled (`nr_throttled`).
    pub throttled_periods: u64,
    /// Time its tasks were throttled in the window, seconds.
    pub throttled_s: f64,
}

/// The block I/O the traced tree issued over the window (`io`), from the block tracepoints.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Io {
    /// The requests by kind, summed exactly as the evidence counted them.
    #[serde(flatten)]
    pub counts: IoCounts,
    /// Sum of request latencies, submission to completion.
    pub wait_s: f64,
    /// Latency quantiles (upper edges of log2 buckets), null without I/O.
    pub latency_us: Option<Quantiles>,
    /// Per traced process (entries with `pid`).
    pub by_process: Vec<IoEntry>,
    /// Per block device (entries with `device`).
    pub by_device: Vec<IoEntry>,
}

/// Block I/O requests by kind: what the evidence sums per process, per device and in all,
/// and what the report's `io` section shows unchanged (its own fields beside them, in
/// seconds, are converted from the evidence's nanoseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IoCounts {
    /// Read requests.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Discards, flushes and other requests.
    pub others: u64,
    /// Requests that completed with an error.
    pub errors: u64,
}

/// Request latency quantiles, in microseconds: each the upper edge of a log2 bucket.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Quantiles {
    /// Median, microseconds.
    pub p50: u64,
    /// 95th percentile, microseconds.
    pub p95: u64,
    /// 99th percentile, microseconds.
    pub p99: u64,
    /// The upper edge of the slowest request's bucket, microseconds.
    pub max: u64,
}

/// I/O totals of one process (`pid`) or one device (`device`, `major:minor`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IoEntry {
    /// The process, in a per-process entry; absent in a per-device one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The block device (`major:minor`), in a per-device entry; absent in a per-process one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Read requests.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write requests.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Sum of request latencies, submission to completion, seconds.
    pub wait_s: f64,
}

/// NVML's view of the GPUs (`gpu`), sampled through the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Gpu {
    /// Always true: where NVML is unavailable the whole `gpu` section is null.
    pub available: bool,
    /// The NVIDIA driver's version as NVML gives it; null where it did not.
    pub driver_version: Option<String>,
    /// NVML sampling rate.
    pub sample_hz: f64,
    /// Every GPU NVML lists.
    pub devices: Vec<GpuDevice>,
    /// The target's `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` at attach.
    #[serde(default)]
    pub cuda_env: CudaEnv,
}

/// One GPU as NVML saw it over the window (`gpu.devices`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuDevice {
    /// NVML's index (CUDA may number devices differently; match by `uuid`).
    pub index: u32,
    /// NVML's UUID of the device (`GPU-…`).
    pub uuid: String,
    /// The product name.
    pub name: String,
    /// Highest memory use seen in the window.
    pub memory_used_bytes: u64,
    /// The device's total memory, bytes.
    pub memory_total_bytes: u64,
    /// Mean utilization over the window (percent of time some kernel ran).
    pub utilization_gpu_pct: Option<u32>,
    /// Percent of time some kernel ran, over the window (`utilization_source` says from what);
    /// null where NVML gave no reading.
    pub utilization: Option<Distribution>,
    /// `sample-buffer` (the driver's high-resolution samples) or `utilization.gpu`.
    #[serde(default)]
    pub utilization_source: String,
    /// Hopper GPM SM activity (percent of SM time busy): how much of the GPU worked.
    pub sm_activity_pct: Option<Distribution>,
    /// Hopper GPM tensor-core activity, percent; null where GPM gave no reading.
    pub tensor_activity_pct: Option<Distribution>,
    /// GPU memory the traced processes hold on this device.
    pub target_memory_bytes: Option<u64>,
    /// The device's PCI bus id, as NVML gives it.
    #[serde(default)]
    pub pci_bus_id: String,
    /// Percent of time device memory was read or written.
    #[serde(default)]
    pub memory_util_pct: Option<Distribution>,
    /// Hopper GPM: resident warps over the maximum.
    #[serde(default)]
    pub sm_occupancy_pct: Option<Distribution>,
    /// Board power, watts; null where NVML gave no reading.
    #[serde(default)]
    pub power_w: Option<Distribution>,
    /// SM clock, megahertz; null where NVML gave no reading.
    #[serde(default)]
    pub sm_clock_mhz: Option<Distribution>,
    /// PCIe throughput, MB/s (read once a second).
    #[serde(default)]
    pub pcie_rx_mb_s: Option<Distribution>,
    /// PCIe throughput the GPU sent (NVML's transmit counter), MB/s, read once a second; null
    /// where NVML gave no reading.
    #[serde(default)]
    pub pcie_tx_mb_s: Option<Distribution>,
    /// Clock throttle reasons seen, with the fraction of readings each was active in.
    #[serde(default)]
    pub throttle_reasons: Vec<ThrottleSeen>,
    /// Processes holding memory here at the end, or seen using it: who else is on the GPU.
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
    /// Mean SM utilization NVML attributes to the traced processes (once a second).
    #[serde(default)]
    pub target_sm_util_pct: Option<f64>,
    /// Whether the target's `CUDA_VISIBLE_DEVICES` shows it this device (null: cannot be told).
    #[serde(default)]
    pub visible_to_target: Option<bool>,
    /// The PCIe link's best generation and width (NVML's maximum for this GPU in this system).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_max_gen: Option<u32>,
    /// The PCIe link's best width (lanes), as for `pcie_max_gen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_max_width: Option<u32>,
    /// The link as it ran while the GPU worked (the best read at a busy moment; an idle GPU
    /// trains it down); null where not read. Below the maximum, copies are slower for it.
    #[serde(default)]
    pub pcie_under_load: Option<PcieLink>,
    /// NVLink links NVML reports active on this GPU (null where NVML does not support
    /// NVLink here): where there are some, GPUs of one host talk over them, not PCIe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks_active: Option<u32>,
    /// The NUMA node of the GPU's PCI device; null on a machine without NUMA.
    #[serde(default)]
    pub numa_node: Option<i32>,
}

/// A PCIe link's generation and width (lanes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PcieLink {
    /// The PCIe generation.
    pub gen: u32,
    /// The link width, lanes.
    pub width: u32,
}

/// One clock throttle reason seen (`gpu.devices[].throttle_reasons`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThrottleSeen {
    /// NVML's reason, in words: `sw-power-cap`, `hw-slowdown`, `sync-boost`,
    /// `sw-thermal-slowdown`, `hw-thermal-slowdown`, `hw-power-brake-slowdown`,
    /// `applications-clocks-setting` or `display-clock-setting` (idle is left out).
    pub reason: String,
    /// The share of readings it was active in, 0..1.
    pub fraction: f64,
}

/// A process on a GPU (`gpu.devices[].processes`), traced or not.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuProcess {
    /// Its host process id, as NVML reports it.
    pub pid: u32,
    /// Whether it is one of the traced processes (NVML reports host pids: see docs/report.md).
    pub traced: bool,
    /// GPU memory it held on this device at the end, bytes; null where it was only seen using
    /// the SMs.
    pub memory_bytes: Option<u64>,
    /// Its mean SM utilization per NVML, percent; null where it was never seen using the SMs.
    pub sm_util_pct: Option<f64>,
}

/// A summary of samples over the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Distribution {
    /// The mean.
    pub mean: f64,
    /// The median.
    pub p50: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// How many readings (or driver samples) it is made of.
    pub samples: usize,
}

/// Declares [`DiagnosisId`] from one row per diagnosis (`Variant = "json-name"`, under its
/// doc): the enum, its JSON name (the serde name and [`DiagnosisId::as_str`] are the same
/// literal), [`DiagnosisId::ALL`] and [`DiagnosisId::index`]. A new diagnosis is one row here,
/// and its definition in `tracer-analysis/src/detect/diagnoses/` (docs/development.md).
macro_rules! diagnosis_ids {
    ($($(#[doc = $doc:literal])* $variant:ident = $name:literal,)*) => {
        /// What a diagnosis is, and the verdict's word: the JSON names (`launch-bound`, …) that
        /// docs/report.md lists and scripts match on.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
        pub enum DiagnosisId {
            $($(#[doc = $doc])* #[serde(rename = $name)] $variant,)*
        }

        impl DiagnosisId {
            /// How many there are.
            pub const COUNT: usize = [$($name),*].len();
            /// Every id, in [`Self::index`] order (the order of declaration).
            pub const ALL: [Self; Self::COUNT] = [$(Self::$variant),*];

            /// Its place in [`Self::ALL`].
            #[must_use]
            pub const fn index(self) -> usize {
                self as usize
            }

            /// The name the JSON reports use.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }
        }
    };
}

diagnosis_ids! {
    /// The host launch path (Python, driver) paces the GPU.
    LaunchBound = "launch-bound",
    /// Host work between launches leaves the GPU waiting.
    HostBound = "host-bound",
    /// A sync every step (`.item()`, `synchronize`) empties the GPU queue.
    HostSync = "host-sync",
    /// Copies from pageable host memory.
    PageableCopy = "pageable-copy",
    /// Copies the host waits for.
    BlockingCopy = "blocking-copy",
    /// Device memory allocated and freed every step.
    AllocChurn = "alloc-churn",
    /// Training threads runnable but not running.
    CpuStarved = "cpu-starved",
    /// The training thread blocked on disk reads.
    IoStall = "io-stall",
    /// The training thread waits for its input (a DataLoader).
    InputStarved = "input-starved",
    /// The training thread sleeps between steps.
    HostSleep = "host-sleep",
    /// Kernels too small to fill the GPU.
    SmallKernels = "small-kernels",
    /// A periodic save of device state stalls the training.
    CheckpointStall = "checkpoint-stall",
    /// The GPU is the limiter (healthy).
    GpuBound = "gpu-bound",
    /// An allocation failed for lack of device memory.
    Oom = "oom",
    /// Allocations fail while memory is free in pieces.
    Fragmentation = "fragmentation",
    /// Device memory grows every step.
    MemoryGrowth = "memory-growth",
    /// Memory reserved through the driver and never used.
    MemoryReserved = "memory-reserved",
    /// A verdict only: no CUDA work was seen.
    NoCudaWork = "no-cuda-work",
    /// A verdict only: CUDA work, no detector fired, and nothing says the GPU is the limiter.
    NoBottleneckFound = "no-bottleneck-found",
    /// One rank's host phase makes the other ranks wait in their collectives.
    Straggler = "straggler",
    /// Collectives, not compute nor a rank, bound the step.
    CommBound = "comm-bound",
}

impl std::fmt::Display for DiagnosisId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found (`diagnoses`), with what it costs, why it was found and the fix.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Diagnosis {
    /// What it is.
    pub id: DiagnosisId,
    /// `high`, `medium`, `low` or `info`.
    pub severity: crate::severity::Severity,
    /// Share of the active time (`window.active_s`) this costs, 0..1; for a diagnosis with a
    /// simulated fix, the share its fix gives back.
    pub impact: f64,
    /// The problem in one sentence.
    pub summary: String,
    /// The measurements it rests on, in sentences.
    pub evidence: Vec<String>,
    /// What to change, in the framework's terms where the stacks show one.
    pub fix: String,
    /// The time-account bucket (`time_account.buckets[].name`) the impact is a part of.
    pub bucket: Option<TimeBucket>,
    /// What the fix would save; null for `gpu-bound`.
    pub saving: Option<Saving>,
    /// The code that causes it, costliest first; empty where unknown (no stacks).
    #[serde(default)]
    pub sites: Vec<Site>,
}

/// An estimate of what a diagnosis's fix, applied alone, would save over the window.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Saving {
    /// Share of the active time (`window.active_s`) the fix gives back.
    pub fraction: f64,
    /// `fraction × window.active_s`.
    pub seconds: f64,
    /// Steps per second after the fix, when steps were found.
    pub steps_per_s_after: Option<f64>,
    /// How the estimate was made, in a sentence.
    pub basis: String,
    /// The step time today over the step time after this fix alone, simulated on the step
    /// model (`step_model`); also where no steps were found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// `[low, high]`: the speed-ups the evidence allows (the GPU's busy time and the
    /// launching share of host time at either end of their ranges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[f64; 2]>,
    /// What limits the step after the fix: `gpu`, `cores`, `launch-rate`, `input`, `host`,
    /// `bus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    /// For a fix that moves work to other processes (DataLoader workers): the workers the
    /// speed-up is simulated with, the fewest that reach the step's next bound, at most one
    /// per free core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// Where the fix has more than one form (host-sync: `sync`, the sync alone;
    /// `sync-and-bookkeeping`, the sync and the host work that waits on its value), each form
    /// simulated; the ranked one is last, and its figures are also `speedup` and `range`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<SavingVariant>,
}

/// One form of a fix (`saving.variants`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SavingVariant {
    /// Its name: `sync`, `sync-and-bookkeeping`.
    pub name: String,
    /// The step time today over the step time after it.
    pub speedup: f64,
    /// `[low, high]`: the speed-ups the evidence allows.
    pub range: [f64; 2],
    /// What it does, in a sentence.
    pub basis: String,
}

/// Completeness and cost of the trace (`tracer`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Tracer {
    /// Events lost anywhere (sum of `loss`); 0 means the counts are complete.
    pub lost_events: u64,
    /// Return probes were off: calls are counted (in `probes`), not timed or detailed.
    #[serde(default)]
    pub entry_only: bool,
    /// What tracing cost the job, estimated from the probe hits.
    #[serde(default)]
    pub overhead: Overhead,
    /// Whether every count is exact: no lost events, no process probed late, launch counts
    /// not estimated, and for a recording, a closed, undamaged file with no frame dropped.
    pub complete: bool,
    /// Processes that ran with a CUDA driver library mapped before it was probed (a file
    /// replaced on disk, a library loaded from an unexpected place): some of their calls,
    /// at most one rescan interval (200 ms) each, were not seen. Not `complete` when > 0.
    #[serde(default)]
    pub probed_late: u64,
    /// Per place where an event or a detail could be lost; `lost_events` sums those that lose
    /// events.
    pub loss: Loss,
    /// Hits per probed symbol.
    pub probes: Vec<ProbeHits>,
    /// The libraries gputrace attached probes to.
    pub libraries: Vec<LibraryEntry>,
    /// Milliseconds from start to all probes armed.
    pub attach_ms: f64,
    /// How the uprobes were attached: `multi` (multi-uprobe links, Linux ≥ 6.6: detached
    /// together, in about one grace period) or `perf-event` (one perf event per probe, each
    /// detach waiting its turn). Absent in reports made before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uprobe_links: Option<LinkKind>,
    /// Where `attach_ms` went: loading the object, the verifier, the return-probe check,
    /// the tracepoints, the uprobes, and the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_ms: Option<Startup>,
    /// Times a process memory map was read to classify copies.
    pub maps_reads: u64,
    /// What gputrace could not see, and the doctor's checks that bear on a diagnosis, in
    /// sentences.
    pub notes: Vec<String>,
    /// gputrace's peak resident memory while tracing (`VmHWM`), where known.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// gputrace's CPU time (user + system) from its start to the end of tracing.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// Ring-buffer records delivered and folded in (kernel launches are counted in the
    /// kernel, not sent: they are not among them).
    #[serde(default)]
    pub events_delivered: u64,
    /// Of them, CUDA call records (one per traced call that returned).
    #[serde(default)]
    pub call_events_delivered: u64,
    /// Present when the report was made from a recording (`gputrace report FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<RecordingNote>,
    /// What `--max-overhead` did (absent without it): which probes were taken off part of
    /// the time, for what share of the window, and whether the budget was met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// How the native stacks fared (absent with `--no-stacks`, and in reports made before it
    /// existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<StackCounts>,
}

/// The estimated cost of tracing to the job (docs/report.md, `tracer.overhead`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Overhead {
    /// Uprobe traps taken by the job's threads (a call with a return probe traps twice).
    pub traps: u64,
    /// The mean cost per trap, ns.
    pub trap_ns: f64,
    /// Traps × cost, all threads.
    pub estimated_s: f64,
    /// The thread whose probes cost it the most (modelled); null without traps.
    pub busiest_thread: Option<u32>,
    /// That thread's modelled cost, seconds.
    pub busiest_thread_s: f64,
    /// `busiest_thread_s` over the whole window, at most 1: the slowdown of the job's most
    /// affected thread.
    pub fraction_of_window: f64,
    /// `measured` (trap costs measured apart on this kernel, plus our programs' run time) or
    /// `assumed` (1 µs a trap, where no measurement exists).
    #[serde(default)]
    pub basis: String,
    /// Traps × the costs measured apart (`measured`), all threads: `estimated_s`.
    #[serde(default)]
    pub modelled_s: f64,
    /// The time the job's threads were seen inside our traps by their CPU samples, beside the
    /// model (absent where the sampler did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampledCost>,
    /// The measured cost of a trap by the instruction it sits on, and of a return probe.
    #[serde(default)]
    pub measured: Option<TrapCosts>,
    /// Every probe that fired, costliest first.
    #[serde(default)]
    pub per_probe: Vec<ProbeCost>,
}

/// The probes' cost as the traced threads' own CPU samples saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SampledCost {
    /// Samples that found a traced thread on a CPU.
    pub samples: u64,
    /// Of those samples, the ones inside one of our traps.
    pub in_trap: u64,
    /// `in_trap` / the sampling rate: the time the traced threads spent in our traps.
    pub in_trap_s: f64,
    /// `in_trap_s` over `modelled_s`, once `in_trap` reaches `min_in_trap` (its statistical
    /// error is then about ±18 %); null before. Shown, not applied: the samples also
    /// take page faults and interrupts for traps (an upper bound; docs/report.md).
    pub scale: Option<f64>,
    /// The in-trap samples needed before `scale` is given (30).
    pub min_in_trap: u64,
}

/// What one probed symbol cost the job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeCost {
    /// The probed function.
    pub symbol: String,
    /// The instruction the probe sits on (null where unknown: an old recording).
    pub entry: Option<EntryKind>,
    /// Per call: the entry trap and what our entry program did in it.
    pub entry_ns: f64,
    /// Per call: the return trap and our return program; 0 where the probe has no return probe.
    pub return_ns: f64,
    /// Of `entry_ns + return_ns`, our programs' own run time, as the kernel accounted it
    /// (absent where that accounting was off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_ns: Option<f64>,
    /// Its hits, all threads.
    pub hits: u64,
    /// What they cost the job, seconds: hits × (`entry_ns` + `return_ns`).
    pub cost_s: f64,
}

/// Events and details lost, per place (`tracer.loss`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Loss {
    /// Events dropped because the ring buffer was full.
    pub ring_full: u64,
    /// Of `ring_full`, CUDA call records (already in `ring_full`; not added twice).
    #[serde(default)]
    pub ring_full_calls: u64,
    /// A thread's counters could not be kept (the thread map was full).
    pub thread_map_full: u64,
    /// A call's entry could not be remembered: its thread was inside two other probed calls.
    pub inflight_full: u64,
    /// Returns whose entry was not seen (calls in flight at attach, or entered while
    /// `--max-overhead` had their probes off): not a loss, not in `lost_events`.
    pub unmatched_return: u64,
    /// A child process could not be traced (the process map was full).
    pub process_map_full: u64,
    /// A thread's scheduler accounting could not be kept (the scheduler map was full).
    pub sched_map_full: u64,
    /// A block request could not be remembered until its completion (the I/O map was full).
    pub io_map_full: u64,
    /// Kinds of wakeup that could not be counted (the waker map was full): the split of
    /// off-CPU time by waker (`time_account.waits`) is then partial. Not a lost event.
    #[serde(default)]
    pub wake_map_full: u64,
    /// Stack samples not counted (the sample map was full): the sites are partial.
    #[serde(default)]
    pub sample_map_full: u64,
    /// User stacks not copied for unwinding (the ring buffer was half full): their frame
    /// pointer stacks stood in, shorter where the code has no frame pointers. Not a lost event.
    #[serde(default)]
    pub stack_copy_failed: u64,
    /// Records user space could not decode (a kernel and user-space version mismatch, or a
    /// damaged recording).
    pub undecodable: u64,
}

/// How the native stacks fared (docs/report.md, `tracer.stacks`): taken, and of them usable,
/// cut short or failed, weighted by what each stands for (samples, off-CPU spells,
/// allocations). Sites' shares are of usable stacks only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StackCounts {
    /// Stacks taken, each counted as many times as it stands for.
    pub taken: u64,
    /// Stacks that reach code beyond the system's and CUDA's libraries, or a thread's root.
    pub usable: u64,
    /// Stacks of system or CUDA frames only, that stop before the code calling them.
    pub cut_short: u64,
    /// Stacks with no frame at all.
    pub failed: u64,
    /// The same, per process.
    pub processes: Vec<ProcessStackCounts>,
}

/// [`StackCounts`] of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessStackCounts {
    /// The process id.
    pub pid: u32,
    /// Stacks taken in this process.
    pub taken: u64,
    /// Of them, usable.
    pub usable: u64,
    /// Of them, cut short.
    pub cut_short: u64,
    /// Of them, failed.
    pub failed: u64,
}

/// One probed symbol and its hits (`tracer.probes`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeHits {
    /// The probed function.
    pub symbol: String,
    /// Every library it was probed in, comma-separated (one program serves them all, so the
    /// hits cannot be split by library).
    pub library: String,
    /// Its hits: calls by traced threads.
    pub hits: u64,
}

/// A library gputrace attached probes to (`tracer.libraries`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LibraryEntry {
    /// Its path, as the process names it.
    pub path: String,
    /// Its inode.
    pub inode: u64,
    /// How many of its symbols were probed.
    pub symbols: usize,
}

/// What the budget did, for the report (`tracer.sampling`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Sampling {
    /// The budget asked for (`--max-overhead`), percent of the busiest traced thread's time.
    pub max_overhead_pct: f64,
    /// The probes that were taken off part of the time: the launch probes, and where they
    /// alone could not keep the budget, the copy, memset and sync probes too.
    pub probes: Vec<String>,
    /// The share of the window they were on (1: never taken off). What they counted (and
    /// with the calls, their bytes and times and the wakeups) is scaled by time from it
    /// (`tracer.notes` says how); allocation and scheduler figures are exact.
    pub on_fraction: f64,
    /// Off phases, one per period of shedding.
    pub cycles: u64,
    /// The window's estimated cost, percent of the busiest traced thread: the figure of
    /// `tracer.overhead.fraction_of_window` (and of the text report), as a percentage.
    pub estimated_overhead_pct: f64,
    /// Whether the window's estimated cost (`tracer.overhead.fraction_of_window`) kept the
    /// budget.
    pub met: bool,
    /// Whether the budget can be kept by taking probes off at the rates last seen (false:
    /// the probes never taken off alone, or the others at the shortest duty cycle, cost
    /// more).
    pub achievable: bool,
    /// Empty-queue spells left out because the launch probes were off during them.
    pub spells_unseen: u64,
}

/// The job's CUDA device environment, read from `/proc/PID/environ` at attach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaEnv {
    /// `CUDA_VISIBLE_DEVICES`; null where unset.
    pub visible_devices: Option<String>,
    /// `CUDA_DEVICE_ORDER`; null where unset.
    pub device_order: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnosis_ids_keep_their_json_names_and_each_is_documented() {
        let doc = include_str!("../../docs/report.md");
        for id in DiagnosisId::ALL {
            assert_eq!(serde_json::to_value(id).expect("serializes"), serde_json::json!(id.as_str()));
            assert_eq!(serde_json::from_value::<DiagnosisId>(serde_json::json!(id.as_str())).expect("reads back"), id);
            assert!(doc.contains(&format!("`{id}`")), "docs/report.md does not list `{id}`");
        }
        let names: std::collections::BTreeSet<&str> = DiagnosisId::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(names.len(), DiagnosisId::ALL.len(), "every id once");
    }

    #[test]
    fn time_buckets_keep_their_json_names() {
        for b in [TimeBucket::LaunchingAndHost, TimeBucket::WaitingOnGpu, TimeBucket::Sleeping] {
            assert_eq!(serde_json::to_value(b).expect("serializes"), serde_json::json!(b.as_str()));
        }
        assert_eq!(TimeBucket::LaunchingAndHost.label(), "launching and host");
    }
}

/// Where a report's evidence came from when it was read from a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RecordingNote {
    /// The recording file's path, as given.
    pub file: String,
    /// `file` or `flight`.
    pub mode: String,
    /// Which file of a rotated session: 0 for the first, one more for each rotation.
    pub segment: u32,
    /// Whether the file began with the session (false for a file opened by rotation).
    pub from_session_start: bool,
    /// Frames read from the file.
    pub frames: u64,
    /// Frames the recorder could not write (a full disk).
    pub frames_dropped: u64,
    /// Where reading stopped early, and why.
    pub damage: Option<String>,
    /// Whether the file was closed properly (an end record, or a flight recorder's dump):
    /// a file without one ends at the recorder's last flush.
    pub closed: bool,
    /// The recording format's version (the file's preamble). A file older than the format
    /// this gputrace writes lacks the evidence added since (docs/recording.md, "Format
    /// versions"); its report says what the file holds.
    #[serde(default)]
    pub format_version: u32,
}

// The types below are defined here, where the report is, and re-exported by the stage that
// fills them in: the model imports nothing of the stages (no import cycle; tests/tests/house.rs).

/// The frameworks told apart. The PyTorch family is named by its outermost layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Framework {
    /// Plain PyTorch.
    Pytorch,
    /// PyTorch Lightning.
    Lightning,
    /// Hugging Face Transformers' `Trainer`.
    HfTrainer,
    /// Hugging Face Accelerate.
    Accelerate,
    /// `DeepSpeed`.
    Deepspeed,
    /// `vLLM`.
    Vllm,
    /// `SGLang`.
    Sglang,
    /// JAX.
    Jax,
    /// `TensorFlow`.
    Tensorflow,
}

impl Framework {
    /// The name the JSON report uses (`pytorch`, `hf-trainer`, …).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pytorch => "pytorch",
            Self::Lightning => "lightning",
            Self::HfTrainer => "hf-trainer",
            Self::Accelerate => "accelerate",
            Self::Deepspeed => "deepspeed",
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Jax => "jax",
            Self::Tensorflow => "tensorflow",
        }
    }
}

/// One code location and the time charged to it (`diagnoses[].sites`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Site {
    /// `train.py:42 in train_step`.
    pub frame: String,
    /// The source file; null where unknown.
    pub file: Option<String>,
    /// The line in it; null where unknown.
    pub line: Option<u32>,
    /// The function, demangled, or its address in hex where unknown.
    pub function: String,
    /// Time charged to it, seconds; 0 for a memory diagnosis, whose sites are weighed by bytes.
    pub seconds: f64,
    /// Of the time of the stacks considered (the diagnosis's activity), this site's part; for
    /// a memory diagnosis, of the bytes.
    pub share: f64,
    /// Memory diagnoses: the bytes this site allocated (or asked for, where they failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Stacks (samples, off-CPU spells or allocations) charged to this site; a site resting
    /// on fewer than `stacks::sites::FEW_STACKS` is noted as such in its diagnosis. Absent in reports made
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stacks: Option<u64>,
    /// Where the time goes inside a framework, when the site is a call into one (`fit(...)`,
    /// `trainer.train()`, a jitted step): the user's only frame says nothing of which of the
    /// framework's own parts (its loop, logging, progress bar, collate) to turn. Absent
    /// where the site calls no framework.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<Inside>,
}

/// The second level of a site that calls into a framework ([`Site::inside`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Inside {
    /// The framework's package, as its files are installed (`lightning`, `transformers`).
    pub package: String,
    /// Its parts, costliest first, at most `stacks::sites::INSIDE_PARTS`.
    pub parts: Vec<InsidePart>,
}

/// One part of a framework beneath a site: the innermost frame still in the framework, and
/// the package it called into where that is another (`torch/utils`, `tqdm`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InsidePart {
    /// `progress/tqdm_progress.py:280 in on_train_batch_end → tqdm`.
    pub frame: String,
    /// Of the site's time (or bytes).
    pub share: f64,
    /// Stacks charged to this part.
    pub stacks: u64,
}

/// How the uprobes are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// `BPF_TRACE_UPROBE_MULTI` links: detached together in about one grace period.
    Multi,
    /// One perf event per probe: each detach waits for its own grace period, in turn.
    PerfEvent,
}

/// Where the start-up time went, in milliseconds (`tracer.startup_ms`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Startup {
    /// Reading the object and creating its maps.
    pub load_ms: f64,
    /// Loading the uprobe programs: mostly the verifier's time.
    pub verifier_ms: f64,
    /// The return-probe safety check (a forked child under seccomp, `return_safety`).
    pub return_check_ms: f64,
    /// Loading and attaching the task, scheduler and block tracepoints and the CPU sampler.
    pub tracepoints_ms: f64,
    /// Finding the target's CUDA libraries and attaching the uprobes to them.
    pub uprobes_ms: f64,
    /// From gputrace's start to armed (the report's `attach_ms`).
    pub total_ms: f64,
}

/// The kind of instruction a probe sits on, as far as its trap cost goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// `push reg` (emulated by x86-64 kernels since 5.x).
    Push,
    /// A NOP (`nop`, `nopl …`).
    Nop,
    /// `endbr64` (CET builds).
    Endbr,
    /// A relative jump, call or conditional branch (emulated).
    Branch,
    /// Anything else: executed out of line by single-stepping.
    Stepped,
}

/// Measured cost per trap, ns, by what the probe sits on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrapCosts {
    /// A trap on a function that begins with `push`, ns.
    pub push_ns: f64,
    /// A trap on a function that begins with a NOP, ns.
    pub nop_ns: f64,
    /// A trap on a function that begins with `endbr64`, ns.
    pub endbr_ns: f64,
    /// A trap on a function that begins with a relative jump, call or branch, ns.
    pub branch_ns: f64,
    /// A trap on a function that begins with any other instruction (single-stepped), ns.
    pub stepped_ns: f64,
    /// A return probe's own cost (its entry excluded).
    pub return_ns: f64,
    /// What our own programs took per run on top of the trap, by probe id, as the kernel
    /// accounted it over the session (`BPF_ENABLE_STATS`). Empty where that was off, and in
    /// recordings made before it existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub program_ns: BTreeMap<u32, ProgramNs>,
    /// The traced threads' CPU samples over the session, and those that caught a thread
    /// inside a trap: the probes' cost measured in the job itself. Absent where the sampler
    /// did not run, and in recordings made before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<TrapSampling>,
}

impl TrapCosts {
    /// What the model assumes for every trap where no measurement exists (a recording cut
    /// before its end record): ~0.9 µs measured for a bare uprobe on a `push`-led function
    /// on the GPU machine, rounded up (docs/facts.md).
    pub const ASSUMED_NS: f64 = 1_000.0;

    /// The measured cost of one trap on a function that begins with `kind`.
    #[must_use]
    pub fn entry_ns(&self, kind: EntryKind) -> f64 {
        match kind {
            EntryKind::Push => self.push_ns,
            EntryKind::Nop => self.nop_ns,
            EntryKind::Endbr => self.endbr_ns,
            EntryKind::Branch => self.branch_ns,
            EntryKind::Stepped => self.stepped_ns,
        }
    }
}

/// CPU samples of the traced threads (a perf event at `hz` per CPU), and how many of them
/// found a thread inside a uprobe trap: each stands for 1/`hz` s of that thread's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TrapSampling {
    /// CPU samples that found a traced thread on a CPU.
    pub samples: u64,
    /// Of them, those that found it inside a uprobe trap.
    pub in_trap: u64,
    /// The sampling rate, samples a second per CPU.
    pub hz: u64,
}

/// One probe's programs' mean run time, ns, and how many times its entry program ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProgramNs {
    /// The entry program's mean run time, ns.
    pub entry_ns: f64,
    /// 0 where the probe has no return program.
    pub return_ns: f64,
    /// How many times the entry program ran.
    pub runs: u64,
}
