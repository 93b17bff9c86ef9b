//! The pure analysis of gputrace (issue 59): the kernel's records decoded (`decode`), folded
//! into the evidence of a window (`evidence`), the stacks charged to call sites (`stacks`),
//! NVML's samples summarized (`gpu_samples`), and the diagnoses judged, each with its fix simulated
//! on a model of the step (`detect`).
//!
//! Nothing here loads a probe, reads a file or a process, or writes anywhere: it imports no
//! aya and does no I/O, so that the live report and a recording's offline report are the same
//! function of the same evidence, and every stage is tested on synthetic inputs. The tracer
//! (`gputrace`) collects the evidence and writes the reports; it re-exports these modules
//! under the same names.

#![deny(missing_docs)]

pub mod decode;
pub mod detect;
pub mod evidence;
pub mod gpu_samples;
pub mod printable;
pub mod stacks;

/// The report's types (`tracer-model`).
pub use gputrace_model as model;
/// How bad a diagnosis is.
pub use gputrace_model::severity;
