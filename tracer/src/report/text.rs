//! The report for a person: verdict first, then the diagnoses with numbers and fixes, then
//! the tables. Fits 80 columns; colour only when writing to a terminal.

use crate::severity::Severity;
use std::fmt::Write as _;

use crate::{
    model::{CopyDir, Report},
    output::{
        style,
        wrap::{bytes, clean, terminal_safe, wrap},
    },
};

struct Style {
    color: bool,
}

impl Style {
    fn paint(&self, style: anstyle::Style, s: &str) -> String {
        style::paint(self.color, style, s)
    }
}

/// Power, clocks, PCIe, throttling and the other processes on a device, where NVML said.
fn gpu_extras(out: &mut String, d: &crate::model::GpuDevice) {
    let mean = |d: &Option<crate::model::Distribution>| d.as_ref().map(|x| x.mean);
    let mut power = Vec::new();
    if let Some(w) = mean(&d.power_w) {
        power.push(format!("{w:.0} W"));
    }
    if let Some(mhz) = mean(&d.sm_clock_mhz) {
        power.push(format!("SM clock {mhz:.0} MHz"));
    }
    if let (Some(rx), Some(tx)) = (mean(&d.pcie_rx_mb_s), mean(&d.pcie_tx_mb_s)) {
        power.push(format!("PCIe in {rx:.0} / out {tx:.0} MB/s"));
    }
    if !power.is_empty() {
        let _ = writeln!(out, "    {}", power.join(", "));
    }
    for t in &d.throttle_reasons {
        let _ = writeln!(out, "    clocks held back by {} {:.0}% of the time", clean(&t.reason), t.fraction * 100.0);
    }
    let others: Vec<String> = d
        .processes
        .iter()
        .filter(|p| !p.traced)
        .map(|p| format!("pid {} ({})", p.pid, p.memory_bytes.map_or("? B".into(), bytes)))
        .collect();
    if !others.is_empty() {
        wrap(out, "    also on this GPU: ", &others.join(", "));
    }
}

/// The conventional name of a signal number (x86-64 Linux numbering).
fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => "a signal",
    }
}

/// The report as text for a person, 80 columns wide; `color` adds terminal colours.
#[must_use]
pub fn render(r: &Report, color: bool) -> String {
    let st = Style { color };
    let mut out = String::new();
    let mut title = format!("gputrace: pid {} — {}", r.target.pid, clean(&r.target.command));
    if title.chars().count() > 80 {
        // The full command line is in the JSON report; the title keeps to one line.
        title = title.chars().take(79).chain(['…']).collect();
    }
    let _ = writeln!(out, "{}", st.paint(style::BOLD, &title));
    let _ = writeln!(out, "traced {:.2} s, stopped by {}", r.window.duration_s, r.window.stopped_by);
    match (r.target.exit_signal, r.target.exit_code) {
        (Some(sig), _) => {
            let _ = writeln!(out, "{}", st.paint(style::BOLD_RED, &format!("the command was killed by signal {sig} ({})", signal_name(sig))));
        }
        (None, Some(code)) if code != 0 => {
            let _ = writeln!(out, "the command exited with status {code}");
        }
        _ => {}
    }
    let _ = writeln!(out);
    let pace = r.steps.as_ref().map_or(String::new(), |s| format!(" ({:.2} steps/s)", s.per_second));
    let _ = writeln!(out, "{} {}{pace}", st.paint(style::BOLD, "VERDICT:"), st.paint(style::BOLD_YELLOW, r.verdict.as_str()));
    diagnoses_section(&mut out, &st, r);

    steps_section(&mut out, &st, r);
    cuda_section(&mut out, &st, r);
    account_section(&mut out, &st, r);
    if let Some(m) = r.cpu.main_thread.as_ref().filter(|m| m.on_cpu_s.is_some()) {
        let f = |v: Option<f64>| v.unwrap_or(0.0);
        let _ = writeln!(out, "\n{}", st.paint(style::BOLD, "HOST"));
        let _ = writeln!(out, "  main thread {}: on CPU {:.3} s, waiting for a CPU {:.3} s,", m.tid, f(m.on_cpu_s), f(m.runqueue_s));
        let _ = writeln!(out, "  {:>12}  I/O wait {:.3} s, sleeping {:.3} s", "", f(m.io_wait_s), f(m.sleep_s));
    }
    if let Some(io) = r.io.as_ref().filter(|io| io.counts.reads + io.counts.writes > 0) {
        let _ = writeln!(
            out,
            "  block I/O   {} reads ({}), {} writes ({}), {:.3} s in flight",
            io.counts.reads,
            bytes(io.counts.read_bytes),
            io.counts.writes,
            bytes(io.counts.write_bytes),
            io.wait_s
        );
    }
    if let Some(g) = &r.gpu {
        let _ = writeln!(out, "\n{}", st.paint(style::BOLD, "GPU"));
        for d in &g.devices {
            let util = d.utilization_gpu_pct.map_or("?".into(), |u| format!("{u}%"));
            let sm = d.sm_activity_pct.as_ref().map_or(String::new(), |s| format!(", SMs busy {:.0}%", s.mean));
            let _ =
                writeln!(out, "  {} {}: {} of {} used", d.index, clean(&d.name), bytes(d.memory_used_bytes), bytes(d.memory_total_bytes));
            let _ = writeln!(out, "    a kernel running {util} of the time{sm}");
            gpu_extras(&mut out, d);
        }
    }
    let t = &r.tracer;
    let _ = writeln!(out, "\n{}", st.paint(style::BOLD, "TRACER"));
    let _ = writeln!(
        out,
        "  {} probes in {} libraries, armed in {:.0} ms; {}",
        t.probes.len(),
        t.libraries.len(),
        t.attach_ms,
        if t.complete {
            "no events lost".to_owned()
        } else if t.lost_events > 0 {
            st.paint(style::RED, &format!("{} events LOST: counts are incomplete", t.lost_events))
        } else if t.probed_late > 0 {
            st.paint(style::RED, &format!("calls of {} process(es) were missed before their CUDA library was probed: counts are a lower bound", t.probed_late))
        } else if r.cuda.launches.estimated {
            st.paint(style::YELLOW, "launch counts are ESTIMATES (--max-overhead); every other count is exact")
        } else {
            st.paint(style::RED, "the recording is incomplete: counts are a lower bound")
        }
    );
    if t.overhead.traps > 0 {
        let mut cost = format!(
            "{:.1}% of its busiest thread ({} probe traps, {:.1} µs each on average, {})",
            t.overhead.fraction_of_window * 100.0,
            t.overhead.traps,
            t.overhead.trap_ns / 1e3,
            t.overhead.basis
        );
        // The costliest probe, when the kernel single-steps its instruction: the usual
        // reason a trace costs more than expected.
        if let Some(p) = t.overhead.per_probe.first().filter(|p| p.entry == Some(crate::probes::trap_cost::EntryKind::Stepped)) {
            let _ = write!(cost, "; {} is single-stepped by the kernel ({:.1} µs a call, {:.3} s in all)", p.symbol, (p.entry_ns + p.return_ns) / 1e3, p.cost_s);
        }
        wrap(&mut out, "  estimated cost to the job: ", &cost);
    }
    if let Some(rec) = &t.recording {
        let what = if rec.from_session_start { "from the start of the session" } else { "a later part of the session" };
        wrap(&mut out, "  from recording: ", &clean(&format!("{} ({} mode, segment {}, {what}, {} frames)", rec.file, rec.mode, rec.segment, rec.frames)));
    }
    for n in &t.notes {
        wrap(&mut out, "  note: ", &clean(n));
    }
    // Every string above from the traced process or a recording is cleaned where it enters;
    // this pass keeps one that is not from reaching the terminal all the same.
    terminal_safe(&out)
}

fn diagnoses_section(out: &mut String, st: &Style, r: &Report) {
    for d in &r.diagnoses {
        let sev = match d.severity {
            Severity::High => st.paint(style::BOLD_RED, "HIGH"),
            Severity::Medium => st.paint(style::YELLOW, "MEDIUM"),
            Severity::Low => "low".to_owned(),
            Severity::Info => "info".to_owned(),
        };
        // Impacts are shares of the active time (the window less its pauses).
        let active = if r.window.phases.is_empty() { r.window.duration_s } else { r.window.active_s };
        if d.bucket.is_none() && d.impact == 0.0 {
            // A memory problem: it costs memory, not time.
            let _ = writeln!(out, "\n[{sev}] {}", d.id);
        } else {
            let _ = writeln!(out, "\n[{sev}] {} — costs {:.0}% of the time ({:.2} s)", d.id, d.impact * 100.0, d.impact * active);
        }
        wrap(out, "  ", &d.summary);
        // A problem too small to matter is named, not detailed (the JSON has it all).
        if d.severity == Severity::Info && d.saving.is_some() {
            continue;
        }
        for e in &d.evidence {
            wrap(out, "  · ", e);
        }
        for site in &d.sites {
            let weight = site.bytes.map_or_else(|| format!("{:.2} s", site.seconds), bytes);
            wrap(out, "  at ", &format!("{} — {weight}, {:.0}%", site.frame, site.share * 100.0));
            if let Some(inside) = &site.inside {
                let parts: Vec<String> = inside.parts.iter().map(|p| format!("{:.0}% {}", p.share * 100.0, p.frame)).collect();
                wrap(out, "     ", &format!("inside {}: {}", inside.package, parts.join("; ")));
            }
        }
        wrap(out, "  fix: ", &d.fix);
        if let Some(s) = &d.saving {
            let after = s.steps_per_s_after.map_or(String::new(), |a| format!(", {a:.2} steps/s"));
            wrap(out, "  saves: ", &format!("~{:.2} s ({:.0}%){after} — {}", s.seconds, s.fraction * 100.0, s.basis));
        }
    }
    if r.diagnoses.is_empty() {
        let _ = writeln!(out, "  no problem found in the CUDA calls seen");
    }
}

fn account_section(out: &mut String, st: &Style, r: &Report) {
    if let Some(a) = &r.time_account {
        let who = if a.threads.len() > 1 { format!("{} threads", a.threads.len()) } else { format!("thread {}", a.tid) };
        let _ = writeln!(out, "\n{}", st.paint(style::BOLD, &format!("WHERE THE LAUNCHING TIME WENT ({who})")));
        if a.threads.len() > 1 {
            let tids: Vec<String> = a.threads.iter().map(u32::to_string).collect();
            wrap(
                out,
                "  ",
                &format!(
                    "threads {} taking turns{}",
                    tids.join(", "),
                    if a.concurrent { " (ran at once: scaled to the window)" } else { "" }
                ),
            );
        }
        for b in a.buckets.iter().filter(|b| b.fraction >= 0.005) {
            let bar = "#".repeat((b.fraction * 40.0).round() as usize);
            let _ = writeln!(out, "  {:<20} {:>5.1}%  {bar}", b.name.label(), b.fraction * 100.0);
            for p in a.parts.iter().filter(|p| p.bucket == b.name && p.fraction >= 0.005) {
                let _ = writeln!(out, "    of which {:<22} {:>5.1}%", p.name.replace('_', " "), p.fraction * 100.0);
            }
        }
        let waits: Vec<String> =
            a.waits.iter().filter(|(_, s)| **s >= 0.0005).map(|(k, s)| format!("{} {:.3} s", k.replace('_', " "), s)).collect();
        if !waits.is_empty() {
            wrap(out, "  off the CPU, woken by: ", &waits.join(", "));
            for w in a.wakers.iter().filter(|w| w.kind != "gpu").take(3) {
                let site = if w.site.is_empty() { String::new() } else { format!(" via {}", clean(&w.site)) };
                wrap(out, "    ", &format!("{:.3} s: thread {} woken {}× by {}{site}", w.seconds, w.tid, w.count, clean(&w.waker)));
            }
        }
    }
    let paused: Vec<String> = r
        .window
        .phases
        .iter()
        .filter(|p| p.kind == "paused")
        .map(|p| format!("{:.1}–{:.1} s", p.start_s, p.end_s))
        .collect();
    if !paused.is_empty() {
        wrap(
            out,
            "  ",
            &format!(
                "paused (asleep on a timer, nothing launched) at {}: left out, shares are of the {:.2} s active",
                paused.join(", "),
                r.window.active_s
            ),
        );
    }
}

fn steps_section(out: &mut String, st: &Style, r: &Report) {
    let Some(s) = &r.steps else { return };
    let _ = writeln!(out, "\n{}", st.paint(style::BOLD, "STEPS"));
    wrap(out, "  marker ", &format!("{} ({} seen, {:.0}% on the beat)", s.marker, s.markers, s.on_beat * 100.0));
    let t = &s.step_time_s;
    let _ = writeln!(
        out,
        "  {:.2} steps/s; step time mean {:.1} ms, p50 {:.1} ms, p95 {:.1} ms",
        s.per_second,
        t.mean * 1e3,
        t.p50 * 1e3,
        t.p95 * 1e3
    );
    let p = &s.per_step;
    let _ = writeln!(
        out,
        "  per step: {:.1} launches, {:.1} syncs, H2D {}, D2H {}",
        p.launches,
        p.syncs,
        bytes(p.h2d_bytes as u64),
        bytes(p.d2h_bytes as u64)
    );
    let _ = writeln!(out, "  {:>10} waiting for input {:.1} ms, for the GPU {:.1} ms", "", p.input_wait_s * 1e3, p.gpu_wait_s * 1e3);
}

fn cuda_section(out: &mut String, st: &Style, r: &Report) {
    let c = &r.cuda;
    let _ = writeln!(out, "\n{}", st.paint(style::BOLD, "CUDA"));
    if c.launches.estimated {
        // Scaled from the part of the window the launch probes were on: never shown as a count.
        let on = r.tracer.sampling.as_ref().map_or(String::new(), |s| format!(", the launch probes on {:.0}% of the window", s.on_fraction * 100.0));
        let _ = writeln!(out, "  launches   ~{} (~{:.0}/s): ~{} kernels, ~{} graph replays", c.launches.kernels + c.launches.graphs, c.launches.launch_rate_per_s, c.launches.kernels, c.launches.graphs);
        wrap(out, "             ", &format!("(estimated: --max-overhead{on})"));
    } else {
        // A graph's replay is a launch the host makes (CONTRACT, fourth wave): a job replaying
        // graphs read "0 kernels (0/s)" here, as if it launched nothing.
        let _ = writeln!(out, "  launches   {} ({:.0}/s): {} kernels, {} graph replays", c.launches.kernels + c.launches.graphs, c.launches.launch_rate_per_s, c.launches.kernels, c.launches.graphs);
    }
    let _ = writeln!(out, "  syncs      {} calls, {:.3} s waiting", c.syncs.count, c.syncs.wait_s);
    if let Some(g) = &r.gpu_idle {
        let nvml = match (g.nvml_idle_fraction, g.consistent) {
            (Some(idle), Some(true)) => format!("; NVML: no kernel {:.0}% of the time", idle * 100.0),
            (Some(idle), _) => format!("; NVML says {:.0}%: INCONSISTENT", idle * 100.0),
            _ => String::new(),
        };
        wrap(
            out,
            "  GPU idle   ",
            &format!("≥ {:.3} s ({:.0}%): queue empty after syncs{nvml}", g.lower_bound_s, g.lower_bound_fraction * 100.0),
        );
    } else {
        let _ = writeln!(out, "  queue idle {:.3} s after syncs (lower bound on GPU idle)", c.queue_idle_s);
    }
    for (name, d) in [("H2D", &c.copies.h2d), ("D2H", &c.copies.d2h), ("D2D", &c.copies.d2d), ("H2H", &c.copies.h2h)] {
        copy_line(out, name, d);
    }
    let _ = writeln!(
        out,
        "  device mem {} allocs ({}), {} frees, {} failed",
        c.allocs.count,
        bytes(c.allocs.bytes),
        c.allocs.frees,
        c.allocs.failures
    );
    if let Some(m) = &r.memory {
        memory_line(out, m);
    }
    if c.vmm.maps + c.vmm.unmaps + c.vmm.failures > 0 {
        let _ = writeln!(
            out,
            "  mappings   {} maps ({}), {} unmaps, {:.3} s in calls",
            c.vmm.maps,
            bytes(c.vmm.mapped_bytes),
            c.vmm.unmaps,
            c.vmm.call_s
        );
    }
    let _ = writeln!(out, "  pinned     {} host allocations ({})", c.host_pinned.count, bytes(c.host_pinned.bytes));
    if let Some(n) = &r.nccl {
        nccl_lines(out, n);
    }
    if !c.threads.is_empty() {
        let _ =
            writeln!(out, "\n  {:>8} {:>8} {:>10} {:>7} {:>7} {:>9} {:>9}", "tid", "pid", "kernels", "graphs", "syncs", "wait s", "idle s");
        for t in c.threads.iter().take(8) {
            let _ = writeln!(
                out,
                "  {:>8} {:>8} {:>10} {:>7} {:>7} {:>9.3} {:>9.3}",
                t.tid, t.pid, t.kernels, t.graphs, t.syncs, t.sync_wait_s, t.queue_idle_s
            );
        }
    }
}

/// NCCL: the collectives by kind, then one line a rank.
fn nccl_lines(out: &mut String, n: &crate::model::Nccl) {
    let kinds: Vec<String> = n.by_op.iter().map(|(op, o)| format!("{} {op} ({})", o.count, bytes(o.bytes))).collect();
    wrap(out, "  nccl       ", &format!("{} calls: {}; {:.3} s waited after them", n.calls, kinds.join(", "), n.wait_s));
    let share = |v: Option<f64>| v.map_or_else(|| "?".to_owned(), |f| format!("{:.0}%", f * 100.0));
    for r in &n.ranks {
        let rank = r.rank.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let world = r.world_size.map_or_else(|| "?".to_owned(), |v| v.to_string());
        let gpu = r.gpu.as_deref().map(|g| format!(", GPU {}", clean(g))).unwrap_or_default();
        let verdict = r.verdict.map(|v| format!(", mostly {v} ({})", share(r.verdict_share))).unwrap_or_default();
        let _ = writeln!(
            out,
            "    rank {rank}/{world} pid {}{gpu}: {} calls, host {}, waiting after collectives {}{verdict}",
            r.pid,
            r.calls,
            share(r.host_share),
            share(r.wait_share)
        );
    }
}

/// Reserved through the driver, held per NVML, the context's part, growth.
fn memory_line(out: &mut String, m: &crate::model::Memory) {
    let mut line = format!("{} reserved (peak {})", bytes(m.reserved_bytes), bytes(m.peak_reserved_bytes));
    if let Some(held) = m.held_bytes {
        let _ = write!(line, "; NVML: {} held", bytes(held));
        if let Some(c) = m.context_bytes {
            let _ = write!(line, ", {} of it the context", bytes(c));
        }
    }
    if let Some(rate) = m.growth_bytes_per_s {
        let _ = write!(line, "; growing {}/s", bytes(rate as u64));
        if let Some(step) = m.growth_bytes_per_step {
            let _ = write!(line, " ({} a step)", bytes(step as u64));
        }
    }
    if m.out_of_memory > 0 {
        let _ = write!(
            line,
            "; {} allocation calls out of memory: {} request(s) recovered by a retry, {} failed for good",
            m.out_of_memory, m.recovered_by_retry, m.failed_for_good
        );
    }
    wrap(out, "  memory     ", &line);
}

fn copy_line(out: &mut String, name: &str, d: &CopyDir) {
    if d.count == 0 {
        return;
    }
    let _ =
        writeln!(out, "  {name}        {} copies, {}, {} pageable, {:.3} s in calls", d.count, bytes(d.bytes), d.pageable, d.blocking_s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(clean("a\x1b[2Jb\nc"), "a?[2Jb?c");
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes(12), "12 B");
        assert_eq!(bytes(4 << 20), "4.0 MiB");
    }
}
