//! The diff for a person: the speed-up first, then the promises checked, the diagnoses that
//! went and came, the time account side by side, and the notes.

use std::fmt::Write as _;

use super::{ids_text, Diff};

/// The diff as text; `fail_below` is said where it was given.
#[must_use]
pub fn render(d: &Diff, fail_below: Option<f64>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_diff(&mut out, d, fail_below);
    out
}

fn write_diff(out: &mut String, d: &Diff, fail_below: Option<f64>) -> std::fmt::Result {
    let word = if d.speedup >= 1.0 { "faster" } else { "slower" };
    writeln!(out, "gputrace diff: ×{:.2} ({word}, by {})", d.speedup, if d.basis == "steps" { "steps per second" } else { "launch rate" })?;
    writeln!(out, "  before  {}  [{}]  verdict {}", d.before.rate(d.basis), d.before.source, d.before.verdict)?;
    writeln!(out, "  after   {}  [{}]  verdict {}", d.after.rate(d.basis), d.after.source, d.after.verdict)?;
    if let Some(x) = fail_below {
        let verdict = if d.speedup < x { "FAILS" } else { "passes" };
        writeln!(out, "  --fail-below {x}: {verdict} (×{:.2})", d.speedup)?;
    }
    if !d.predictions.is_empty() {
        writeln!(out, "\nPromised before, measured after:")?;
        for p in &d.predictions {
            let range = p.range.map(|[lo, hi]| format!(" (range ×{lo:.2}–×{hi:.2})")).unwrap_or_default();
            writeln!(out, "  {} promised ×{:.2}{range}; measured ×{:.2}: {}", p.id, p.predicted, p.measured, p.verdict())?;
        }
    }
    writeln!(out, "\nDiagnoses:")?;
    writeln!(out, "  gone: {}", ids_text(&d.gone))?;
    writeln!(out, "  new:  {}", ids_text(&d.new))?;
    writeln!(out, "  kept: {}", ids_text(&d.kept))?;
    if !d.time_account.is_empty() {
        let per_step = d.time_account.iter().all(|r| r.before_ms_per_step.is_some() && r.after_ms_per_step.is_some());
        writeln!(out, "\nThe main thread's time{}:", if per_step { ", ms a step (share)" } else { " (share of the window)" })?;
        for r in &d.time_account {
            match (r.before_ms_per_step, r.after_ms_per_step) {
                (Some(b), Some(a)) if per_step => writeln!(
                    out,
                    "  {:<20} {b:>9.3} ({:>3.0} %)  →  {a:>9.3} ({:>3.0} %)",
                    r.bucket.replace('_', " "),
                    r.before * 100.0,
                    r.after * 100.0
                )?,
                _ => writeln!(out, "  {:<20} {:>3.0} %  →  {:>3.0} %", r.bucket.replace('_', " "), r.before * 100.0, r.after * 100.0)?,
            }
        }
    }
    if !d.notes.is_empty() {
        writeln!(out, "\nNotes:")?;
        for n in &d.notes {
            writeln!(out, "  - {n}")?;
        }
    }
    Ok(())
}
