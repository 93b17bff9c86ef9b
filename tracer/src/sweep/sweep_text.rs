//! The sweep for a person: who holds which GPU and whether they use it, the idle holders
//! named, then the GPUs and what the sweep cost. Fits 80 columns; colour only on a terminal.

use std::fmt::Write as _;

use super::{classify::duration, model::SweepReport};
use crate::output::{
    style,
    wrap::{bytes, clean, terminal_safe, wrap},
};

/// At most `width` characters, with `…` where cut.
fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_owned()
    } else {
        s.chars().take(width.saturating_sub(1)).chain(['…']).collect()
    }
}

/// The sweep as text for a person, 80 columns wide; `color` adds terminal colours.
#[must_use]
pub fn render(r: &SweepReport, color: bool) -> String {
    let mut out = String::new();
    let n = r.processes.len();
    let title = format!(
        "gputrace sweep: {n} process{} hold{} or use{} a GPU ({:.1} s window)",
        if n == 1 { "" } else { "es" },
        if n == 1 { "s" } else { "" },
        if n == 1 { "s" } else { "" },
        r.window.duration_s
    );
    let _ = writeln!(out, "{}\n", style::paint(color, style::BOLD, &title));
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    if n > 0 {
        let _ = writeln!(
            out,
            "{:>7} {:<10} {:<7} {:>9} {:>8} {:>6} {:>6} {:>8}",
            "PID", "USER", "STATE", "GPU MEM", "LAUNCHES", "SYNCS", "COPIES", "LAST"
        );
    }
    for p in &r.processes {
        let state = match p.state.as_str() {
            "zombie" => style::paint(color, style::BOLD_RED, &format!("{:<7}", p.state)),
            "idle" => style::paint(color, style::YELLOW, &format!("{:<7}", p.state)),
            _ => format!("{:<7}", p.state),
        };
        let last = p.last_activity_s.map_or_else(|| "never".to_owned(), |s| format!("{s:.1}s ago"));
        let _ = writeln!(
            out,
            "{:>7} {:<10} {state} {:>9} {:>8} {:>6} {:>6} {:>8}",
            p.pid,
            fit(&clean(&p.user), 10),
            p.gpu_memory_bytes.map_or_else(|| "?".to_owned(), bytes),
            opt(p.launches),
            opt(p.syncs),
            opt(p.copies),
            if p.launches.is_some() { last } else { "?".to_owned() },
        );
        let hidden = if p.command_hidden { " [command line hidden]" } else { "" };
        let mut facts = Vec::new();
        if let Some(age) = p.age_s {
            facts.push(format!("up {}", duration(age)));
        }
        if let Some(c) = &p.container {
            facts.push(format!("container {c}"));
        }
        if let Some(pod) = &p.pod {
            facts.push(format!("pod {pod}"));
        }
        if let Some(job) = p.worker_of {
            facts.push(format!("worker of {job}"));
        }
        facts.push(format!("holds: {}", p.holds.join(", ")));
        let _ = writeln!(out, "        {}", fit(&format!("{}{hidden}", clean(&p.command)), 72));
        // Container and pod names come from the process's cgroup path: its own to choose.
        let _ = writeln!(out, "        {}", fit(&clean(&facts.join("; ")), 72));
    }
    if n == 0 {
        if r.tracer.processes_hidden {
            let _ = writeln!(out, "  no process visible to you holds or uses a GPU (other users' processes are hidden from you)");
        } else {
            let _ = writeln!(out, "  no process holds or uses a GPU");
        }
    }
    for d in &r.diagnoses {
        let sev = match d.severity {
            crate::severity::Severity::High => style::paint(color, style::BOLD_RED, "HIGH"),
            crate::severity::Severity::Medium => style::paint(color, style::YELLOW, "MEDIUM"),
            other => other.as_str().to_owned(),
        };
        let _ = writeln!(out, "\n[{sev}] {}", d.id);
        wrap(&mut out, "  ", &clean(&d.summary));
        for e in &d.evidence {
            wrap(&mut out, "  · ", &clean(e));
        }
        wrap(&mut out, "  fix: ", &clean(&d.fix));
    }
    jobs(&mut out, r, color);
    if let Some(g) = &r.gpu {
        let _ = writeln!(out, "\n{}", style::paint(color, style::BOLD, "GPU"));
        for d in &g.devices {
            let used = d.memory_used_bytes.map_or_else(|| "?".to_owned(), bytes);
            let total = d.memory_total_bytes.map_or_else(|| "?".to_owned(), bytes);
            let _ = writeln!(out, "  {} {}: {used} of {total} used, {} processes", d.index, fit(&clean(&d.name), 30), d.processes);
        }
    }
    let t = &r.tracer;
    let _ = writeln!(out, "\n{}", style::paint(color, style::BOLD, "TRACER"));
    let _ = writeln!(
        out,
        "  {:.3} s CPU; /proc: {} processes in {:.1} ms ({} passes); {} CUDA calls",
        t.cpu_s, t.processes_scanned, t.proc_scan_ms, t.proc_scans, t.probe_hits
    );
    if r.window.cuda_probes {
        let lost = if t.complete { "no events lost".to_owned() } else { style::paint(color, style::RED, &format!("{} events LOST", t.lost_events)) };
        let _ = writeln!(out, "  probes in {} libraries, armed in {:.0} ms; {lost}", t.libraries.len(), t.attach_ms);
    }
    for note in &t.notes {
        wrap(&mut out, "  note: ", &clean(note));
    }
    // As for the trace report: whatever a renderer forgot to clean stops here.
    terminal_safe(&out)
}

/// Each judged job: its verdict, where its time went, and its bottlenecks with their fixes.
fn jobs(out: &mut String, r: &SweepReport, color: bool) {
    for p in &r.processes {
        let Some(j) = &p.judgement else { continue };
        let t = &j.time;
        let _ = writeln!(out, "\n{} pid {}: {} (over {:.0} s)", style::paint(color, style::BOLD, "JOB"), p.pid, j.verdict, j.window_s);
        let pct = |f: f64| format!("{:.0} %", f * 100.0);
        let gpu = match (j.gpu_utilization, j.sm_activity) {
            (Some(u), Some(sm)) => format!("; GPU busy {}, SMs {}", pct(u), pct(sm)),
            (Some(u), None) => format!("; GPU busy {}", pct(u)),
            _ => String::new(),
        };
        wrap(
            out,
            "  ",
            &format!(
                "{} launching thread{}: host {}, waiting on the GPU {}, in copies {}, for a CPU {}, asleep {}; {:.0} launches/s{gpu}",
                j.threads,
                if j.threads == 1 { "" } else { "s" },
                pct(t.host),
                pct(t.waiting_on_gpu),
                pct(t.in_copies),
                pct(t.waiting_for_cpu),
                pct(t.sleeping),
                j.launches_per_s
            ),
        );
        for d in &j.diagnoses {
            wrap(out, "  · ", &clean(&format!("{} {}: {}", d.id, pct(d.ratio), d.summary)));
            wrap(out, "    fix: ", &clean(&d.fix));
        }
        if !j.diagnoses.is_empty() {
            wrap(out, "  ", &format!("`gputrace attach --pid {}` names the code and the speed-up to expect", p.pid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{model::Tool, sweep::model::*};

    fn report() -> SweepReport {
        SweepReport {
            schema: SCHEMA.into(),
            tool: Tool { name: "gputrace".into(), version: "0".into() },
            window: Window { duration_s: 5.0, stopped_by: "duration".into(), cuda_probes: true },
            processes: vec![Process {
                pid: 4_194_304,
                user: "a-very-long-user-name".into(),
                uid: Some(1000),
                command: format!("python\x1b[2J\n{}", "x".repeat(300)),
                command_hidden: false,
                comm: "python".into(),
                state: "zombie".into(),
                process_state: Some("S".into()),
                parent: Some(1),
                worker_of: None,
                orphaned: true,
                cgroup: None,
                container: Some("0123456789ab".into()),
                pod: None,
                age_s: Some(100_000.0),
                holds: vec!["nvml".into(), "device-mapped".into(), "libcuda".into()],
                device_files: vec!["nvidia0".into()],
                gpus: Vec::new(),
                gpu_memory_bytes: Some(123 << 30),
                launches: Some(u64::MAX),
                syncs: Some(0),
                copies: Some(0),
                last_activity_s: Some(4.9),
                cuda: None,
                judgement: None,
            }],
            diagnoses: Vec::new(),
            gpu: None,
            tracer: Tracer {
                cpu_s: 0.1,
                user_cpu_s: 0.05,
                system_cpu_s: 0.05,
                max_rss_bytes: 0,
                proc_scan_ms: 3.0,
                proc_scans: 2,
                processes_scanned: 200,
                processes_unreadable: 0,
                fds_read: 10,
                attach_ms: 5.0,
                libraries: Vec::new(),
                probe_hits: 0,
                lost_events: 0,
                complete: true,
                processes_hidden: false,
                notes: vec!["the NVML library could not be loaded; GPU memory per process is unknown ".repeat(4)],
            },
        }
    }

    #[test]
    fn fits_80_columns_and_keeps_control_characters_out() {
        let text = render(&report(), false);
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{} columns: {line}", line.chars().count());
        }
        assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
        assert!(text.contains("123.0 GiB"));
    }
}
