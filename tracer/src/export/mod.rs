//! Exports: a recording turned into formats other tools open.

pub mod html;
pub mod perfetto;
pub mod walk;
