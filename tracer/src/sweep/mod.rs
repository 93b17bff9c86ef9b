//! `gputrace sweep`: every process on the host that holds or uses a GPU, judged.
//!
//! Stages, each in its own file: `scan` (the `/proc` census) → `probes` in host-wide mode
//! (every process's CUDA calls, on every distinct libcuda inode mapped on the host and the
//! one the loader would pick for a new process) → `activity` (counters and records folded
//! per process) → `nvml` (memory per process, per-process utilization) → `build` (rows,
//! states, `classify`, `privacy`) → `model` / `text`. `engine` runs these stages over one
//! window (`gputrace sweep`) or window after window with the probes kept (`gputrace serve`).
//! Nothing here kills or signals anything.
//!
//! Why a host-wide flag in the eBPF programs rather than seeding `TRACED` with the holders
//! found by the scan: a process that starts, or first loads CUDA, during the window is
//! counted too, and the scan's answer can be stale by the time the probes are armed.

mod activity;
mod assemble;
mod classify;
mod job;
pub mod engine;
/// The sweep report's types, beside the trace report's in `tracer-model/`.
pub use gputrace_model::sweep as model;
mod holders;
mod privacy;
mod scan;
mod sched;
pub mod sweep_text;
mod users;
mod watch;

use std::time::Duration;

use crate::{error::Result, probes::ProbeSet};
use model::SweepReport;

/// How often the kernel's per-thread counters are read: the resolution of
/// `last_activity_s` for launch-only work (other calls are timed exactly).
const POLL: Duration = Duration::from_millis(200);

/// A validated `sweep` command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long to watch CUDA calls (`--duration`).
    pub duration: Duration,
    /// Show other users' command lines without being root.
    pub show_commands: bool,
}

/// A finished sweep: the report, and the probes still attached until `detach`.
#[derive(Debug)]
pub struct Finished {
    /// The sweep as `--json` prints it.
    pub report: SweepReport,
    probes: Option<ProbeSet>,
}

impl Finished {
    /// Remove the probes, after the report is out (removal waits for the kernel, see
    /// `outcome::Outcome::detach`).
    pub fn detach(&mut self) {
        if let Some(kernel) = self.probes.take() {
            kernel.detach();
        }
    }
}

/// One window of the engine.
pub async fn sweep(options: &Options) -> Result<Finished> {
    let mut signals = engine::Signals::install()?;
    let mut engine = engine::Engine::arm(options.show_commands, false, options.duration);
    let (report, _) = engine.window(options.duration, &mut signals).await?;
    Ok(Finished { report, probes: engine.into_probes() })
}

/// The window when `--duration` is not given: long enough to see a training step or two,
/// short enough to run on a busy host without thinking about it.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);
