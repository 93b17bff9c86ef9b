//! The page's "Before and after" section (`export FILE --html OUT --diff BEFORE`): the
//! comparison `gputrace diff BEFORE FILE` prints, as a table a reviewer can attach.

use std::fmt::Write as _;

use super::markup::esc;
use crate::diff::{ids_text, Diff};

/// The section, as HTML.
#[must_use]
pub fn section(d: &Diff) -> String {
    let mut h = String::with_capacity(4096);
    // Writing to a String cannot fail.
    let _ = write_section(&mut h, d);
    h
}

fn write_section(h: &mut String, d: &Diff) -> std::fmt::Result {
    let word = if d.speedup >= 1.0 { "faster" } else { "slower" };
    write!(
        h,
        r#"<section class="diff"><h2 id="diff">Before and after: ×{:.2} ({word})</h2><table><tr><th></th><th>run</th><th>rate</th><th>verdict</th></tr>"#,
        d.speedup
    )?;
    for (name, s) in [("before", &d.before), ("after", &d.after)] {
        write!(
            h,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.source),
            esc(&s.rate(d.basis)),
            esc(s.verdict.as_str())
        )?;
    }
    h.push_str("</table>");
    if !d.predictions.is_empty() {
        h.push_str("<h3>Promised before, measured after</h3><table><tr><th>fix</th><th>promised</th><th>measured</th><th></th></tr>");
        for p in &d.predictions {
            let range = p.range.map(|[lo, hi]| format!(" (×{lo:.2}–×{hi:.2})")).unwrap_or_default();
            write!(h, "<tr><td>{}</td><td>×{:.2}{range}</td><td>×{:.2}</td><td>{}</td></tr>", esc(&p.id), p.predicted, p.measured, p.verdict())?;
        }
        h.push_str("</table>");
    }
    write!(h, "<p>Diagnoses gone: {} · new: {} · kept: {}</p>", esc(&ids_text(&d.gone)), esc(&ids_text(&d.new)), esc(&ids_text(&d.kept)))?;
    if !d.time_account.is_empty() {
        h.push_str("<table><tr><th>main thread</th><th>before</th><th>after</th></tr>");
        for r in &d.time_account {
            let cell = |share: f64, ms: Option<f64>| ms.map_or_else(|| format!("{:.0} %", share * 100.0), |ms| format!("{ms:.3} ms ({:.0} %)", share * 100.0));
            write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.bucket.replace('_', " ")),
                cell(r.before, r.before_ms_per_step),
                cell(r.after, r.after_ms_per_step)
            )?;
        }
        h.push_str("</table>");
    }
    for n in &d.notes {
        write!(h, r#"<p class="hint">{}</p>"#, esc(n))?;
    }
    h.push_str("</section>");
    Ok(())
}
