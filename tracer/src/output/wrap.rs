//! Text for a person, shared by the trace and sweep reports: sizes in binary units, and
//! lines wrapped to 80 columns.

use std::fmt::Write as _;

pub use crate::printable::{bytes, clean, terminal_safe};

/// Word-wrap `text` to 78 columns; the first line starts with `lead`, the others are
/// indented to line up under it. Each word is made printable: most of what is wrapped
/// (sites, evidence, notes) quotes names that came from the traced process.
pub fn wrap(out: &mut String, lead: &str, text: &str) {
    let hang = " ".repeat(lead.chars().count());
    let mut indent = lead;
    let mut line = String::new();
    for word in text.split_whitespace().map(clean) {
        if !line.is_empty() && hang.len() + line.chars().count() + 1 + word.chars().count() > 78 {
            let _ = writeln!(out, "{indent}{line}");
            indent = &hang;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}
