//! Which code the traced threads ran, and what they were doing in it: user stacks from the
//! kernel's CPU sampler and off-CPU spells (`probes/cpu_sampler.rs`, `SAMPLES`), symbolized here
//! (`native`), and Python frames of CPython targets read from outside (`python`). Each stack
//! carries the CUDA call its thread was in, so a diagnosis can name the code that causes it
//! (the types and the call sites are the analysis crate's, `gputrace_analysis::stacks`).

pub mod copied;
pub mod native;
pub mod python_reader;
pub mod python_frames;
pub mod sections;
pub mod unwind;
pub mod unwind_cost;

pub use gputrace_analysis::stacks::*;
