//! The page: one HTML file with its style, script, drawings and data inline. A
//! Content-Security-Policy that allows nothing from anywhere (`default-src 'none'`) makes
//! "opens offline, asks no server" a property of the file, not a promise: the browser would
//! refuse a request even if a name in the data looked like an address.

use std::fmt::Write as _;

use super::{
    draw::{human, Lane},
    markup::esc,
};
use crate::model::{Diagnosis, Report};

/// A diagnosis with its flamegraph (SVG), where it has one.
#[derive(Debug)]
pub struct Section<'a> {
    pub diagnosis: &'a Diagnosis,
    pub flamegraph: Option<String>,
}

/// Everything the page shows.
#[derive(Debug)]
pub struct Page<'a> {
    pub report: &'a Report,
    pub sections: Vec<Section<'a>>,
    pub lanes: Vec<Lane>,
    /// The lanes' numbers as JSON, for the hover read-out.
    pub lanes_json: String,
    pub bins: usize,
    pub bin_s: f64,
    /// The section comparing an earlier run with this one (`export --html --diff`), as HTML.
    pub diff: Option<String>,
}

/// An SVG as an image source: `data:` with the few characters a URL cannot hold escaped, so
/// the frame names stay readable in the file.
fn svg_data_url(svg: &str) -> String {
    let mut out = String::from("data:image/svg+xml;charset=utf-8,");
    for c in svg.chars() {
        match c {
            '%' => out.push_str("%25"),
            '#' => out.push_str("%23"),
            '"' => out.push_str("%22"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The pages' style (the sweep's page shares it).
pub const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

#[must_use]
pub fn render(p: &Page<'_>) -> String {
    let r = p.report;
    let mut h = String::with_capacity(256 * 1024);
    let title = format!("gputrace: {} — {}", r.verdict, r.target.command);
    let _ = write!(
        h,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{}</title><style>{STYLE}</style></head><body>
<header><h1>gputrace report</h1><p class="meta">{} (pid {}) · {} s traced · started {} on {} · gputrace {}</p></header>
"#,
        esc(&title),
        esc(&r.target.command),
        r.target.pid,
        fmt_s(r.window.duration_s),
        esc(&r.started_at),
        esc(&r.host),
        esc(&r.tool.version),
    );
    if let Some(d) = &p.diff {
        h.push_str(d);
    }
    verdict(&mut h, r);
    diagnoses(&mut h, &p.sections, r.window.duration_s);
    account(&mut h, r);
    timeline(&mut h, p);
    notes(&mut h, r);
    let _ = write!(h, r#"<script type="application/json" id="lanes">{}</script><script>{SCRIPT}</script></body></html>"#, p.lanes_json.replace("</", "<\\/"));
    h
}

fn fmt_s(s: f64) -> String {
    format!("{s:.2}")
}

fn pct(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

fn verdict(h: &mut String, r: &Report) {
    let top = r.diagnoses.iter().find(|d| d.id == r.verdict);
    let sev = top.map_or("info".to_owned(), |d| d.severity.to_string());
    let _ = write!(h, r#"<section class="verdict sev-{}"><h2 id="verdict">VERDICT: {}</h2>"#, esc(&sev), esc(r.verdict.as_str()));
    if let Some(d) = top {
        let _ = write!(h, "<p>{} — costs {} of the time</p>", esc(&d.summary), pct(d.impact));
    }
    h.push_str("</section>\n");
}

fn diagnoses(h: &mut String, sections: &[Section<'_>], window_s: f64) {
    h.push_str("<section><h2>Diagnoses</h2>");
    if sections.is_empty() {
        h.push_str("<p>No problem found.</p>");
    }
    for (i, s) in sections.iter().enumerate() {
        let d = s.diagnosis;
        let sev = d.severity.to_string();
        let _ = write!(
            h,
            r#"<article class="diagnosis" id="d{i}"><h3><span class="badge sev-{}">{}</span> {} — costs {} of the time ({} s)</h3><p>{}</p>"#,
            esc(&sev),
            esc(&sev.to_uppercase()),
            esc(d.id.as_str()),
            pct(d.impact),
            fmt_s(d.impact * window_s),
            esc(&d.summary)
        );
        if !d.evidence.is_empty() {
            h.push_str("<ul class=\"evidence\">");
            for e in &d.evidence {
                let _ = write!(h, "<li>{}</li>", esc(e));
            }
            h.push_str("</ul>");
        }
        if !d.sites.is_empty() {
            h.push_str("<table class=\"sites\"><tr><th>where</th><th>time</th><th>share</th></tr>");
            for site in &d.sites {
                let amount = site.bytes.map_or_else(|| format!("{} s", fmt_s(site.seconds)), |b| human(b as f64, "B"));
                let _ = write!(h, "<tr><td><code>{}</code></td><td>{amount}</td><td>{}</td></tr>", esc(&site.frame), pct(site.share));
                for part in site.inside.iter().flat_map(|inside| inside.parts.iter().map(move |p| (&inside.package, p))) {
                    let _ = write!(h, "<tr class=\"inside\"><td>&nbsp;&nbsp;in {}: <code>{}</code></td><td></td><td>{} of it</td></tr>", esc(part.0), esc(&part.1.frame), pct(part.1.share));
                }
            }
            h.push_str("</table>");
        }
        let _ = write!(h, r#"<p class="fix"><b>fix:</b> {}</p>"#, esc(&d.fix));
        if let Some(saving) = &d.saving {
            let after = saving.steps_per_s_after.map(|s| format!(", {s:.1} steps/s after")).unwrap_or_default();
            let _ = write!(h, r#"<p class="saving"><b>saving:</b> about {} s ({} of the window){after} — {}</p>"#, fmt_s(saving.seconds), pct(saving.fraction), esc(&saving.basis));
        }
        if let Some(svg) = &s.flamegraph {
            let _ = write!(
                h,
                r#"<figure class="flamegraph"><img alt="flamegraph of {id}" src="{}"><figcaption>Call stacks of {id}: width is time, the outermost frame at the bottom.</figcaption></figure>"#,
                esc(&svg_data_url(svg)),
                id = esc(d.id.as_str())
            );
        }
        h.push_str("</article>\n");
    }
    h.push_str("</section>\n");
}

/// The time account as one bar: where the main thread's wall time went.
fn account(h: &mut String, r: &Report) {
    let Some(a) = &r.time_account else { return };
    let helpers = a.threads.len().saturating_sub(1);
    let with = if helpers > 0 { format!(" and {helpers} thread(s) taking turns with it") } else { String::new() };
    let _ = write!(h, r#"<section><h2>Time account</h2><p>Where the wall time of thread {}{with} went ({} s):</p><div class="bar">"#, a.tid, fmt_s(a.window_s));
    for (i, b) in a.buckets.iter().enumerate().filter(|(_, b)| b.fraction > 0.0) {
        let _ = write!(
            h,
            r#"<span class="b{i}" style="width:{:.3}%" title="{}: {} s ({})">{}</span>"#,
            b.fraction * 100.0,
            esc(b.name.as_str()),
            fmt_s(b.seconds),
            pct(b.fraction),
            if b.fraction >= 0.08 { esc(&b.name.label()) } else { String::new() }
        );
    }
    h.push_str("</div><ul class=\"legend\">");
    for (i, b) in a.buckets.iter().enumerate() {
        let _ = write!(h, r#"<li><i class="b{i}"></i>{}: {} s ({})</li>"#, esc(&b.name.label()), fmt_s(b.seconds), pct(b.fraction));
    }
    h.push_str("</ul>");
    if !a.parts.is_empty() {
        h.push_str("<p>Charged to diagnoses: ");
        let parts: Vec<String> = a.parts.iter().map(|p| format!("{} {} s ({}, of {})", esc(&p.name), fmt_s(p.seconds), pct(p.fraction), esc(&p.bucket.label()))).collect();
        h.push_str(&parts.join("; "));
        h.push_str("</p>");
    }
    h.push_str("</section>\n");
}

fn timeline(h: &mut String, p: &Page<'_>) {
    let _ = write!(
        h,
        r#"<section><h2>Timeline</h2><p class="hint">Scroll to zoom, drag to pan, double-click to reset; hover for the numbers of a moment. Each column is {} ms.</p>
<div id="timeline" data-bins="{}" data-bin-s="{}"><div class="axis"><span></span><div id="ticks"></div></div>"#,
        format_args!("{:.0}", p.bin_s * 1e3),
        p.bins,
        p.bin_s
    );
    for lane in &p.lanes {
        let legend: Vec<String> = lane.legend.iter().map(|(c, name)| format!(r#"<span><i style="background:{c}"></i>{}</span>"#, esc(name))).collect();
        let _ = write!(
            h,
            r#"<div class="lane"><div class="label"><b>{}</b><small>top: {}</small><small class="legend">{}</small></div><svg class="lane" viewBox="0 0 {} 100" preserveAspectRatio="none">{}</svg></div>"#,
            esc(lane.title),
            lane.scale,
            legend.join(" "),
            p.bins,
            lane.svg
        );
    }
    h.push_str(r#"<div id="cursor"></div><pre id="readout">hover over the timeline</pre></div></section>"#);
}

fn notes(h: &mut String, r: &Report) {
    let t = &r.tracer;
    let _ = write!(
        h,
        r#"<section class="notes"><h2>Tracer</h2><p>{} events lost{} · probes armed in {:.0} ms · {} libraries probed</p>"#,
        t.lost_events,
        if t.complete { " — counts complete" } else { " — counts incomplete" },
        t.attach_ms,
        t.libraries.len()
    );
    if !t.notes.is_empty() {
        h.push_str("<ul>");
        for n in &t.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_attributes() {
        assert_eq!(esc(r#"<script>"a"&'b'</script>"#), "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;");
    }

    #[test]
    fn a_data_url_keeps_names_readable_and_escapes_what_urls_cannot_hold() {
        let url = svg_data_url("<svg><text fill=\"#fff\">train.py:42 in step 5%</text></svg>\n");
        assert_eq!(url, "data:image/svg+xml;charset=utf-8,<svg><text fill=%22%23fff%22>train.py:42 in step 5%25</text></svg> ");
    }
}
