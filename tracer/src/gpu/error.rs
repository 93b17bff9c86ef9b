//! Why there is no GPU view. Each caller says what goes missing without it (the trace
//! report's GPU figures, the sweep's memory per process), so the reason is said once.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum NoGpuView {
    #[error("NVML sampling is off (--nvml-hz 0)")]
    Off,
    #[error("NVML is unavailable ({0})")]
    Unavailable(nvml_wrapper::error::NvmlError),
    #[error("NVML cannot count the GPUs ({0})")]
    Count(nvml_wrapper::error::NvmlError),
    #[error("NVML sees no GPU")]
    NoDevice,
    #[error("cannot start the NVML thread: {0}")]
    Thread(std::io::Error),
    #[error("NVML did not initialise within {0:?}")]
    StartTimeout(Duration),
    #[error("NVML did not answer within {0:?}")]
    AnswerTimeout(Duration),
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
