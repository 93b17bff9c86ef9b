//! Exports: a recording turned into formats other tools open.

pub mod perfetto;
