//! The report: the typed model (`crate::model`, a leaf every stage may fill), built from a session's evidence (`build`), shown as
//! JSON (serde) or as text for a terminal (`text`). Schema: docs/report.md.
pub mod analysis;
pub mod build;
mod host_sections;
pub mod overhead;
pub mod schema;
pub mod text;

pub use crate::model::Report;
