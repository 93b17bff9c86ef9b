//! Recordings: the sink that writes a session to a file (or a flight-recorder buffer) and
//! the reader that plays it back into the same report offline. The format is documented in
//! docs/recording.md; `format` is its code.

pub mod file;
pub mod format;
pub mod reader;
pub mod recorder;
pub mod replay;

#[cfg(test)]
mod contract;

pub use recorder::{Plan, Recorder};
pub use replay::{replay, Replayed, ReplayError};
