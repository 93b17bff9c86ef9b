//! Output paths: what a path given for output means ([`destination`]) and how it is opened
//! and put in place ([`open`]). Used by `record` and `export`; docs/cli.md, "Output files".

pub mod destination;
pub mod open;
pub mod style;
pub mod wrap;

pub use destination::{resolve, Destination, Refused};
pub use open::{open, Landing};
pub use crate::printable::{clean, clean_lines, terminal_safe};
