//! A sweep as a page (`sweep --html`): the GPUs, every process that holds or uses one as a
//! table, and the diagnoses (idle holders) with their evidence and fix. Same style and the
//! same no-request policy as the recording's page; no script.

use std::fmt::Write as _;

use super::{
    draw::human,
    markup::esc,
    page::STYLE,
};
use crate::sweep::model::SweepReport;

#[must_use]
pub fn render(r: &SweepReport) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>gputrace sweep</title><style>{STYLE}</style></head><body>
<header><h1>gputrace sweep</h1><p class="meta">{} s watched · {} processes hold or use a GPU · gputrace {}</p></header>
"#,
        format_args!("{:.1}", r.window.duration_s),
        r.processes.len(),
        esc(&r.tool.version)
    );
    if let Some(gpu) = &r.gpu {
        h.push_str("<section><h2>GPUs</h2><table class=\"sites\"><tr><th>GPU</th><th>model</th><th>memory used</th><th>processes</th></tr>");
        for d in &gpu.devices {
            let used = match (d.memory_used_bytes, d.memory_total_bytes) {
                (Some(u), Some(t)) => format!("{} of {}", human(u as f64, "B"), human(t as f64, "B")),
                (Some(u), None) => human(u as f64, "B"),
                _ => "?".into(),
            };
            let _ = write!(h, "<tr><td>{}</td><td>{}</td><td>{used}</td><td>{}</td></tr>", d.index, esc(&d.name), d.processes);
        }
        h.push_str("</table></section>\n");
    }
    h.push_str("<section><h2>Diagnoses</h2>");
    let judged = r.processes.iter().filter(|p| p.judgement.as_ref().is_some_and(|j| !j.diagnoses.is_empty()));
    if r.diagnoses.is_empty() && judged.clone().next().is_none() {
        h.push_str("<p>No problem found.</p>");
    }
    for d in &r.diagnoses {
        let sev = d.severity.to_string();
        let memory = d.gpu_memory_bytes.map(|b| format!(", holds {}", human(b as f64, "B"))).unwrap_or_default();
        let _ = write!(
            h,
            r#"<article class="diagnosis"><h3><span class="badge sev-{}">{}</span> {} — pid {} ({}, {}){memory}</h3><p>{}</p><ul class="evidence">"#,
            esc(&sev),
            esc(&sev.to_uppercase()),
            esc(&d.id),
            d.pid,
            esc(&d.user),
            esc(&d.command),
            esc(&d.summary)
        );
        for e in &d.evidence {
            let _ = write!(h, "<li>{}</li>", esc(e));
        }
        let _ = write!(h, r#"</ul><p class="fix"><b>fix:</b> {}</p></article>"#, esc(&d.fix));
    }
    // Each job's bottlenecks over its recent windows (docs/sweep.md, "Each job's judgement").
    for p in judged {
        let Some(j) = &p.judgement else { continue };
        let pct = |f: f64| format!("{:.0} %", f * 100.0);
        let t = &j.time;
        let _ = write!(
            h,
            r#"<article class="diagnosis"><h3>{} — pid {} ({}, {}), over {:.0} s</h3><p>launching threads: host {}, waiting on the GPU {}, in copies {}, for a CPU {}, asleep {}</p><ul class="evidence">"#,
            esc(&j.verdict),
            p.pid,
            esc(&p.user),
            esc(if p.command.is_empty() { &p.comm } else { &p.command }),
            j.window_s,
            pct(t.host),
            pct(t.waiting_on_gpu),
            pct(t.in_copies),
            pct(t.waiting_for_cpu),
            pct(t.sleeping)
        );
        for d in &j.diagnoses {
            let _ = write!(h, "<li><b>{} {}</b>: {} <i>fix:</i> {}</li>", esc(&d.id), pct(d.ratio), esc(&d.summary), esc(&d.fix));
        }
        h.push_str("</ul></article>");
    }
    h.push_str("</section>\n<section><h2>Processes</h2><table class=\"sites\" id=\"processes\"><tr><th>pid</th><th>user</th><th>command</th><th>state</th><th>GPUs</th><th>GPU memory</th><th>launches</th><th>syncs</th><th>copies</th><th>last activity</th><th>age</th><th>container</th></tr>");
    for p in &r.processes {
        let n = |v: Option<u64>| v.map_or_else(|| "–".to_owned(), |v| v.to_string());
        let s = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.0} s"));
        let gpus: Vec<String> = p.gpus.iter().map(|g| g.index.to_string()).collect();
        let command = if p.command.is_empty() { &p.comm } else { &p.command };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            p.pid,
            esc(&p.user),
            esc(command),
            esc(&p.state),
            esc(&gpus.join(", ")),
            p.gpu_memory_bytes.map_or_else(|| "–".to_owned(), |b| human(b as f64, "B")),
            n(p.launches),
            n(p.syncs),
            n(p.copies),
            s(p.last_activity_s),
            s(p.age_s),
            esc(p.pod.as_deref().or(p.container.as_deref()).unwrap_or("")),
        );
    }
    h.push_str("</table></section></body></html>\n");
    h
}
