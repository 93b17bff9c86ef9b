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

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    Duration,
    Signal,
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
    pub evidence: Evidence,
    pub target_pid: u32,
    pub command: String,
    pub exit_status: Option<i32>,
    /// The signal that killed the command, if one did.
    pub exit_signal: Option<i32>,
    /// What a uprobe trap cost here, measured at the end; None where it could not be.
    pub trap_costs: Option<TrapCosts>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stopped_by: StopReason,
    pub libraries: Vec<AttachedLibrary>,
    pub losses: [u64; gputrace_common::loss::COUNT as usize],
    pub attach_ms: f64,
    /// Where the start-up time went, and how the uprobes were attached (live sessions, and
    /// recordings that carry them).
    pub startup: Option<Startup>,
    pub uprobe_links: Option<LinkKind>,
    pub notes: Vec<String>,
    pub maps_reads: u64,
    /// Whether scheduler and block evidence were collected.
    pub sched_traced: bool,
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
    pub host: String,
    /// The cores the target may use (affinity and cgroup quota), read when tracing began.
    pub cpus: Option<f64>,
    /// The job's CPUs against the NUMA nodes, read when tracing began; None on one node.
    pub placement: Option<crate::discover::cpus::Placement>,
    /// What `--max-overhead` did; None without it.
    pub sampling: Option<Sampling>,
}

/// What a recording produced, for the closing message: what the files hold, not what was
/// meant for them (a full disk stops a recording short of the session).
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub files: Vec<PathBuf>,
    pub bytes: u64,
    pub frames: u64,
    /// Where the evidence in the files ends: the time of the last checkpoint or end record
    /// they hold (of the last good dump, for a flight recorder); None when they hold none.
    pub until_ns: Option<u64>,
    pub frames_dropped: u64,
    pub error: Option<String>,
}
