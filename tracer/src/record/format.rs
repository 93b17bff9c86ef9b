//! The recording format, version 1 (docs/recording.md is the reference).
//!
//! A file is a 16-byte preamble then frames. A frame is
//! `[u32 payload length][u16 kind][u16 zero][payload][u32 CRC-32 of kind, zero and payload]`,
//! little-endian. Frames are self-delimiting and checked one by one, so a reader keeps
//! everything before the first damaged or cut frame: a recorder killed mid-write loses at
//! most the frames since its last flush.
//!
//! Kinds are stable, gapped numbers; a reader skips kinds it does not know (a newer minor
//! writer may add some), and refuses a preamble with a newer major version.

use serde::{Deserialize, Serialize};

use crate::{
    evidence::snapshot::Snapshot,
    gpu::{DeviceInfo, Sample},
};

/// The preamble's first 8 bytes: what marks a file as a recording.
pub const MAGIC: &[u8; 8] = b"GPUTRACE";
/// Bumped when a reader of the previous version could misread a file of this one.
pub const VERSION: u32 = 1;
/// Bytes of the preamble: [`MAGIC`], the version as a little-endian u32, and 4 zero bytes.
pub const PREAMBLE_LEN: usize = 16;
/// Length, kind and reserved half-word before the payload; the CRC after it.
pub const FRAME_HEAD: usize = 8;
/// Bytes after the payload: its CRC-32 (see [`checksum`]).
pub const FRAME_TAIL: usize = 4;
/// No frame is larger: a length above this is damage, not a reason to allocate.
pub const MAX_PAYLOAD: usize = 16 << 20;

/// Frame kinds.
pub mod kind {
    /// JSON [`super::Start`]: opens every file.
    pub const START: u16 = 1;
    /// A ring-buffer record, byte for byte as the kernel wrote it.
    pub const EVENT: u16 = 2;
    /// How a host address was classified while the next event was folded in (binary, 24 bytes).
    pub const HOST_CLASS: u16 = 3;
    /// An exited thread's counters: tid (u32), 4 zero bytes, tgid (u32), 4 zero bytes,
    /// `drained_at_ns` (u64), then one u64 hit count per probe slot (`recorder::thread_exit`).
    pub const THREAD_EXIT: u16 = 4;
    /// JSON [`super::Checkpoint`], about once a second.
    pub const CHECKPOINT: u16 = 10;
    /// JSON list of NVML samples taken since the previous one.
    pub const GPU_SAMPLES: u16 = 11;
    /// JSON [`super::Trigger`]: a flight recorder wrote its buffer out, and why.
    pub const TRIGGER: u16 = 12;
    /// JSON [`super::End`]: closes a complete file.
    pub const END: u16 = 20;
}

/// Everything known when tracing begins.
#[expect(clippy::struct_excessive_bools, reason = "a serialized record: each flag is a documented field of the format")]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// `gputrace.recording/1`.
    pub format: String,
    /// The version of the gputrace that recorded.
    pub tool_version: String,
    /// The recording host's name.
    pub host: String,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// Wall-clock time of `start_ns`, seconds since the epoch (for humans: when it happened).
    pub started_unix_s: f64,
    /// Monotonic time tracing began.
    pub start_ns: u64,
    /// The traced process: the pid given, or the started command's.
    pub target_pid: u32,
    /// The target's command line.
    pub command: String,
    /// Milliseconds from start to all probes armed.
    pub attach_ms: f64,
    /// Absent in recordings made before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<crate::probes::Startup>,
    /// How the uprobes were attached; absent in recordings made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uprobe_links: Option<crate::probes::uprobes::LinkKind>,
    /// Whether the scheduler tracepoints were attached (scheduling evidence is in the file).
    pub sched_traced: bool,
    /// Whether the block I/O tracepoints were attached (block I/O evidence is in the file).
    pub io_traced: bool,
    /// NVML's view at the start, or null without NVML.
    pub gpu: Option<GpuStart>,
    /// 0 for the first file of a session; rotated and flight-recorder files count up.
    pub segment: u32,
    /// Whether this file starts where the session started. When not, the file's first
    /// checkpoint is its baseline: counters are reported as their increase over it.
    pub from_session_start: bool,
    /// `file` or `flight`.
    pub mode: String,
    /// The target's CUDA device environment.
    #[serde(default)]
    pub cuda_env: crate::model::CudaEnv,
    /// The cores the target may use, when tracing began; absent in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// The job's CPUs against the NUMA nodes; absent on one node and in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::discover::cpus::CpuPlacement>,
    /// Return probes were off.
    #[serde(default)]
    pub entry_only: bool,
}

/// NVML's view when tracing began.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuStart {
    /// The driver version NVML reports; null where it did not say.
    pub driver_version: Option<String>,
    /// The GPUs (index, UUID, model, memory).
    pub devices: Vec<DeviceInfo>,
    /// Seconds between NVML samples.
    pub sample_interval_s: f64,
}

/// A library gputrace probed, by the name the process uses and the inode it maps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryRecord {
    /// The library's path, as the process names it.
    pub path: String,
    /// The device number of the file system that holds the mapped file.
    pub dev: u64,
    /// The mapped file's inode number.
    pub inode: u64,
    /// The symbols probed in it.
    pub symbols: Vec<String>,
    /// Traced processes seen mapping it.
    #[serde(default)]
    pub mapped_by: Vec<u32>,
    /// Traced processes that mapped it before it was probed.
    #[serde(default)]
    pub probed_late_for: Vec<u32>,
    /// The kind of each probed symbol's first instruction (what its trap costs).
    #[serde(default)]
    pub entry: std::collections::BTreeMap<String, crate::probes::trap_cost::EntryKind>,
}

/// The periodic state of the session: kernel counters and what the session learnt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The kernel's cumulative counters at this moment: per-thread hits, scheduler
    /// accounting, preemptions, cgroup throttling, losses.
    pub snapshot: Snapshot,
    /// The libraries probed so far.
    pub libraries: Vec<LibraryRecord>,
    /// The session's notes so far (the report's `tracer.notes`).
    pub notes: Vec<String>,
    /// Times a process memory map was read to classify copies, so far.
    pub maps_reads: u64,
    /// Owner (real uid) of each process seen, looked up live.
    pub uids: Vec<(u32, Option<u32>)>,
    /// Frames the recorder could not write (a full disk) before this one.
    pub frames_dropped: u64,
}

/// Why a flight recorder wrote its buffer out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    /// When it was triggered, monotonic ns (for `diagnosis`, the checkpoint it fired at).
    pub at_ns: u64,
    /// `signal`, `diagnosis` or `end`.
    pub reason: String,
    /// For `diagnosis`: its id and summary.
    pub diagnosis: Option<String>,
    /// For `diagnosis`: the diagnosis's one-line summary; null otherwise.
    pub summary: Option<String>,
}

/// How a session ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct End {
    /// When tracing ended (or the file was rotated), monotonic ns.
    pub end_ns: u64,
    /// As in the report's `window.stopped_by`.
    pub stopped_by: String,
    /// Exit code of a command started by `run` (128 + the signal if one killed it); null in
    /// `attach` mode, while the command still ran, and in a rotated file's end record.
    pub exit_status: Option<i32>,
    /// The signal that killed the command, if one did.
    #[serde(default)]
    pub exit_signal: Option<i32>,
    /// What a trap cost, measured at the end of the session.
    #[serde(default)]
    pub trap_costs: Option<crate::probes::trap_cost::TrapCosts>,
    /// Devices with the memory the traced processes held at the end.
    pub gpu_devices: Option<Vec<DeviceInfo>>,
    /// Per device, every process holding memory there at the end: (pid, bytes).
    #[serde(default)]
    pub gpu_holders: Vec<Vec<(u32, u64)>>,
    /// The recorder's peak resident memory.
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// The recorder's CPU time to the end of tracing.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// The counters at the end: the last checkpoint, which a report of the file uses.
    pub checkpoint: Checkpoint,
}

/// A classified host address (the answer [`crate::evidence::HostMemory`] gave live).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAnswer {
    /// The process whose address it is.
    pub pid: u32,
    /// The class: 1 a pinned mapping, 2 pageable, 3 unmapped (`replay::class_number`).
    pub class: u32,
    /// The host address classified.
    pub addr: u64,
    /// The copy call's time, monotonic ns: the moment the address was classified as of.
    pub at_ns: u64,
}

impl HostAnswer {
    /// Bytes of the encoded answer, the `HOST_CLASS` frame's payload.
    pub const LEN: usize = 24;

    /// The frame payload: pid, class, address and time, little-endian.
    #[must_use]
    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[0..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4..8].copy_from_slice(&self.class.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.at_ns.to_le_bytes());
        b
    }

    /// Decode a frame payload; None unless it is exactly [`Self::LEN`] bytes.
    #[must_use]
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(Self { pid: u32_at(0), class: u32_at(4), addr: u64_at(8), at_ns: u64_at(16) })
    }
}

/// The NVML samples frame's payload.
pub type GpuSamples = Vec<Sample>;

/// The 16 bytes every recording file begins with: [`MAGIC`], [`VERSION`] and zeros.
#[must_use]
pub fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut p = [0; PREAMBLE_LEN];
    p[..8].copy_from_slice(MAGIC);
    p[8..12].copy_from_slice(&VERSION.to_le_bytes());
    p
}

/// One frame, encoded.
#[must_use]
pub fn frame(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEAD + payload.len() + FRAME_TAIL);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    let crc = checksum(&out[4..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// CRC-32 over kind, reserved half-word and payload.
#[must_use]
pub fn checksum(kind_and_payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(kind_and_payload);
    h.finalize()
}
