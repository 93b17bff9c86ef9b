//! The GPU's own view through NVML: a sampler on its own thread (NVML calls block, and a
//! hung driver must not stall the event loop), and a pure summary of the samples over the
//! traced window. NVML is loaded at run time, so a machine without a GPU (our CI) gets one
//! clear note and `gpu: null`, and everything else works.
pub mod no_gpu_view;
pub mod identity;
pub mod nvml;
pub mod sampler;
pub mod source;

pub use no_gpu_view::NoGpuView;
/// The pure summary of the samples (the analysis crate's).
pub use gputrace_analysis::gpu_samples as summary;
pub use summary::{summarize, Context, DeviceInfo, FineUtil, ProcessUse, Sample};
