//! A recording as one self-contained HTML page (`export --html`, `report --html`): the
//! verdict and each diagnosis as the text report gives them, a flamegraph of each
//! diagnosis's call stacks, the time account as a bar, and a zoomable timeline of the window.
//! Nothing is fetched when it opens: style, script, drawings and numbers are all inline.
//!
//! Stages: `timeline` folds the recording into bins, `draw` turns the bins into SVG lanes,
//! `flame` draws the flamegraphs, `page` writes the HTML. A sweep has a page of its own
//! (`sweep`): its processes as a table.

mod diff;
mod draw;
mod flame;
mod markup;
mod page;
mod sweep_page;
pub mod lanes;

use std::{io, io::Write as _, path::Path};

use crate::{
    detect::rhythm::best_marker,
    output::{self, Destination},
    record::Replayed,
    report::Report,
};

/// Write the page of the recording at `file` to `out`; returns its size in bytes. A file
/// appears at `out` only once the whole page was written.
pub fn write(file: &Path, replayed: &Replayed, report: &Report, diff: Option<&crate::diff::Diff>, out: &Destination) -> io::Result<u64> {
    put(&render(file, replayed, report, diff)?, out)
}

/// Write the page of a sweep to `out`; returns its size in bytes.
pub fn write_sweep(report: &crate::sweep::model::SweepReport, out: &Destination) -> io::Result<u64> {
    put(&sweep_page::render(report), out)
}

fn put(html: &str, out: &Destination) -> io::Result<u64> {
    let (opened, mut placement) = output::open(out, 0o600).map_err(|e| io::Error::other(e.to_string()))?;
    let mut w = io::BufWriter::new(opened);
    w.write_all(html.as_bytes())?;
    w.flush()?;
    drop(w);
    if let Some(p) = placement.as_mut() {
        p.publish()?;
    }
    Ok(html.len() as u64)
}

/// The page, as text; with `diff`, it opens with the comparison of an earlier run against
/// this one.
pub fn render(file: &Path, replayed: &Replayed, report: &Report, diff: Option<&crate::diff::Diff>) -> io::Result<String> {
    let outcome = &replayed.outcome;
    let ev = &outcome.evidence;
    let time = crate::detect::startup::account(ev, outcome.start_ns, outcome.end_ns);
    let step_times: Vec<u64> = time.as_ref().and_then(|t| best_marker(ev, t)).map(|(_, times, _)| times.iter().copied().collect()).unwrap_or_default();
    let threads: Vec<u32> = report.time_account.as_ref().map(|a| a.threads.clone()).unwrap_or_default();
    let scope = lanes::Scope {
        start_ns: outcome.start_ns,
        end_ns: outcome.end_ns,
        main_tid: report.time_account.as_ref().map(|a| a.tid),
        evidence: ev,
        step_times: &step_times,
    };
    let lanes = lanes::collect(file, &scope)?;
    let sections = report.diagnoses.iter().map(|d| page::Section { diagnosis: d, flamegraph: flame::svg(ev, d.id, &threads) }).collect();
    let page = page::Page {
        report,
        sections,
        lanes: draw::lanes(&lanes),
        lanes_json: serde_json::to_string(&lanes).map_err(io::Error::other)?,
        bins: lanes.bins,
        bin_s: lanes.bin_ns as f64 / 1e9,
        diff: diff.map(diff::section),
    };
    Ok(page::render(&page))
}
