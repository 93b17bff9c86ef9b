//! What a finished session hands the report: the evidence, the window and how it ended,
//! the probes still attached, and the notes. A live session and a recording's replay both
//! make one (`session`, `record::replay`); `report` reads it. A leaf: it names the stages'
//! types and no stage's code.

use std::{path::PathBuf, time::Duration};

use crate::{
    evidence::Evidence,
    gpu::sampler::Finished as GpuSamples,
    model::{CudaEnv, Sampling},
    probes::{trap_cost::TrapCosts, uprobes::LinkKind, AttachedLibrary, ProbeSet, Startup},
};

/// Why the tracing window ended (`window.stopped_by` in the report).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// The `--duration` elapsed.
    Duration,
    /// SIGINT or SIGTERM stopped the session.
    Signal,
    /// The target exited.
    TargetExited,
    /// A recording file that ends because the recording went on in the next file.
    Rotated,
    /// A recording that ends without its end record (the recorder was killed, the disk filled).
    RecordingCut,
    /// A flight recorder's file written mid-session (on a signal or a diagnosis).
    FlightDump,
}

impl StopReason {
    /// The reason as recorded (`window.stopped_by`); unknown words read as a cut recording.
    #[must_use]
    pub fn parse(s: &str) -> Self {
        match s {
            "duration" => Self::Duration,
            "signal" => Self::Signal,
            "target-exited" => Self::TargetExited,
            "rotated" => Self::Rotated,
            "flight-dump" => Self::FlightDump,
            _ => Self::RecordingCut,
        }
    }

    /// The reason as written in reports and recordings, in kebab case (`target-exited`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Duration => "duration",
            Self::Signal => "signal",
            Self::TargetExited => "target-exited",
            Self::Rotated => "rotated",
            Self::RecordingCut => "recording-cut",
            Self::FlightDump => "flight-dump",
        }
    }
}

pub use crate::model::RecordingNote;

/// Everything a report needs from a finished session.
#[derive(Debug)]
pub struct Outcome {
    /// What the probes saw, folded per process and thread.
    pub evidence: Evidence,
    /// The traced process: the pid given to `attach`, or the command's pid in `run`.
    pub target_pid: u32,
    /// The target's command line.
    pub command: String,
    /// Exit code of a command started by `run` (128 + the signal if one killed it); None in
    /// `attach` mode or while the command still ran.
    pub exit_status: Option<i32>,
    /// The signal that killed the command, if one did.
    pub exit_signal: Option<i32>,
    /// What a uprobe trap cost here, measured at the end; None where it could not be.
    pub trap_costs: Option<TrapCosts>,
    /// When the window began, monotonic ns (`CLOCK_MONOTONIC`).
    pub start_ns: u64,
    /// When the window ended, monotonic ns (`CLOCK_MONOTONIC`).
    pub end_ns: u64,
    /// Why the window ended.
    pub stopped_by: StopReason,
    /// The CUDA libraries the uprobes were attached to, and what was probed in each.
    pub libraries: Vec<AttachedLibrary>,
    /// What the kernel side lost, a count per cause, indexed by `gputrace_common::loss`.
    pub losses: [u64; gputrace_common::loss::COUNT as usize],
    /// Milliseconds from start to all probes armed.
    pub attach_ms: f64,
    /// Where the start-up time went, and how the uprobes were attached (live sessions, and
    /// recordings that carry them).
    pub startup: Option<Startup>,
    /// How the uprobes were attached; None for a recording that does not say.
    pub uprobe_links: Option<LinkKind>,
    /// Sentences for the report's `tracer.notes`: what was missed, approximated or worked around.
    pub notes: Vec<String>,
    /// Times a process memory map was read to classify copies.
    pub maps_reads: u64,
    /// Whether scheduler and block evidence were collected.
    pub sched_traced: bool,
    /// Whether block I/O evidence was collected (the block tracepoints were attached).
    pub io_traced: bool,
    /// The probes, still attached: detached by `detach` once the report is out.
    pub probes: Option<ProbeSet>,
    /// NVML samples, and the sampling interval; None where NVML is unavailable.
    pub gpu: Option<(GpuSamples, Duration)>,
    /// Set when the outcome was read back from a recording.
    pub recording: Option<RecordingNote>,
    /// What a live session wrote to its recording.
    pub written: Option<Written>,
    /// The target's CUDA device environment.
    pub cuda_env: CudaEnv,
    /// gputrace's own peak resident memory at the end of tracing (`VmHWM`).
    pub peak_rss_bytes: Option<u64>,
    /// gputrace's own CPU time (user + system) from its start to the end of tracing.
    pub cpu_s: Option<f64>,
    /// Return probes were off (calls counted, not timed).
    pub entry_only: bool,
    /// Wall-clock time tracing began, seconds since the epoch, and the host it ran on.
    pub started_unix_s: f64,
    /// The host's name (`/proc/sys/kernel/hostname`); empty where it could not be read.
    pub host: String,
    /// The cores the target may use (affinity and cgroup quota), read when tracing began.
    pub cpus: Option<f64>,
    /// The job's CPUs against the NUMA nodes, read when tracing began; None on one node.
    pub placement: Option<crate::discover::cpus::CpuPlacement>,
    /// What `--max-overhead` did; None without it.
    pub sampling: Option<Sampling>,
}

/// What a recording produced, for the closing message: what the files hold, not what was
/// meant for them (a full disk stops a recording short of the session).
#[derive(Clone, Debug, Default)]
pub struct Written {
    /// The recording's files: the path given or, once a file recording has ended, every
    /// segment of it still on disk.
    pub files: Vec<PathBuf>,
    /// Bytes the files hold, as of the last good flush (a flight recorder: the sum over its
    /// dumps).
    pub bytes: u64,
    /// Frames the files hold, as of the last good flush (a flight recorder: frames put in its
    /// buffer, including those trimmed since).
    pub frames: u64,
    /// Where the evidence in the files ends: the time of the last checkpoint or end record
    /// they hold (of the last good dump, for a flight recorder); None when they hold none.
    pub until_ns: Option<u64>,
    /// Frames that never reached the files: too large for the format, or written after a
    /// write failed or a rotation could not open the next file.
    pub frames_dropped: u64,
    /// Why the recording stopped short, as a message; None when every write succeeded.
    pub error: Option<String>,
}
