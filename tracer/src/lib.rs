//! gputrace: tells an ML engineer why their GPU sits idle.
//!
//! Data flows one way through modules named for their stage:
//! `discover` (processes, libraries, symbols) → `probes` (load and attach eBPF) →
//! `collect` (ring buffer, memory maps) → `decode` (bytes → events) → `evidence` (totals) →
//! `stacks` (call sites) → `detect` (diagnoses) → `report` (JSON, text). `model` (the report's
//! types) is a crate of its own, `tracer-model`, that depends on nothing here; `outcome` (what
//! a session hands the report) gathers what the stages produced.
//! `session` sequences the stages; `cli` is the command line; `gpu` is the NVML view; `sweep`
//! is the host-wide census, `serve` its windows as Prometheus metrics and `top` as a live view.

#![deny(missing_docs)]

pub mod cli;
/// The report's types, a crate of their own (`tracer-model/`) so that none can import a stage.
pub use gputrace_model as model;
/// How bad a diagnosis is, shared by the detectors, the sweep and the reports.
pub use gputrace_model::severity;
/// The pure analysis, a crate of its own (`tracer-analysis/`) that imports no aya and does no
/// I/O: decoding, the evidence, the diagnoses and their fixes.
pub use gputrace_analysis::{decode, detect, evidence, printable};
pub mod clock;
pub mod collect;
pub mod diff;
pub mod discover;
pub mod doctor;
pub mod error;
pub mod export;
pub mod fuzzing;
pub mod gpu;
mod preflight;
pub mod outcome;
pub mod output;
pub mod probes;
pub mod record;
pub mod report;
pub mod serve;
pub mod session;
pub mod top;
pub mod stacks;
pub mod sweep;
pub mod usage;

/// What the unit tests of several modules share.
#[cfg(test)]
pub(crate) mod test_support {
    use std::path::{Path, PathBuf};

    /// An empty scratch folder for one test, removed when the test is done with it.
    pub(crate) struct Scratch(PathBuf);

    impl std::ops::Deref for Scratch {
        type Target = Path;

        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for Scratch {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `gputrace-PREFIX-PID-NAME` under the temporary folder, emptied if a previous run left
    /// it, and removed again when dropped.
    pub(crate) fn scratch(prefix: &str, name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("gputrace-{prefix}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }
}
