//! Why there is no GPU view. Each caller says what goes missing without it (the trace
//! report's GPU figures, the sweep's memory per process), so the reason is said once.

use std::time::Duration;

/// Why NVML gave no view of the GPUs.
#[derive(Debug, thiserror::Error)]
pub enum NoGpuView {
    /// Sampling was turned off with `--nvml-hz 0`.
    #[error("NVML sampling is off (--nvml-hz 0)")]
    Off,
    /// NVML could not be initialised (no driver, no `libnvidia-ml`).
    #[error("NVML is unavailable ({0})")]
    Unavailable(nvml_wrapper::error::NvmlError),
    /// NVML failed to say how many GPUs there are.
    #[error("NVML cannot count the GPUs ({0})")]
    Count(nvml_wrapper::error::NvmlError),
    /// NVML lists no GPU it can open.
    #[error("NVML sees no GPU")]
    NoDevice,
    /// The thread that talks to NVML could not be spawned.
    #[error("cannot start the NVML thread: {0}")]
    Thread(std::io::Error),
    /// NVML did not finish starting within the given time.
    #[error("NVML did not initialise within {0:?}")]
    StartTimeout(Duration),
    /// A one-off NVML query (the sweep's) did not return within the given time.
    #[error("NVML did not answer within {0:?}")]
    AnswerTimeout(Duration),
    /// An earlier one-off query (a window's) has not returned yet, after the given deadline:
    /// the driver hangs, and no new query is started until that one returns.
    #[error("NVML has not answered an earlier query yet (given {0:?}); this window's query is skipped until it does")]
    StillAsking(Duration),
    /// The sampling thread did not hand back its samples when tracing ended.
    #[error("NVML did not answer at the end of the trace")]
    EndTimeout,
}

impl NoGpuView {
    /// The note a trace report carries: the reason, and what it costs.
    #[must_use]
    pub fn trace_note(&self) -> String {
        match self {
            Self::Off | Self::EndTimeout => self.to_string(),
            _ => format!("{self}; GPU-side figures are omitted"),
        }
    }
}
