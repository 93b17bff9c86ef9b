//! One frame of `top` (pure: a sweep and a sort order in, widgets drawn into a frame out;
//! unit-tested against ratatui's test backend).
//!
//! Every text that came from elsewhere (user, pod, command and GPU names, diagnosis ids) is
//! [`clean`]ed as it enters a cell: ratatui (0.29) writes a span's characters into the
//! buffer as they are, and the buffer goes to the terminal as it is, so a command named with
//! an escape sequence would otherwise drive the terminal of whoever runs `top`.

use ratatui::{
    layout::{Constraint, Layout},
    style::{Modifier, Style},
    text::Line,
    widgets::{Block, Borders, Paragraph, Row, Table},
    Frame,
};

use crate::{
    output::clean,
    sweep::model::{Process, SweepReport},
};

/// What the process table is sorted by (most first, but for the pid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sort {
    /// Rogue holders first, then by memory: the sweep's own order.
    #[default]
    State,
    /// GPU memory held, most first (`m`).
    Memory,
    /// Launches a second, most first (`l`).
    Launches,
    /// Pid, lowest first (`p`).
    Pid,
    /// User name, in alphabetical order (`u`).
    User,
}

impl Sort {
    fn name(self) -> &'static str {
        match self {
            Self::State => "state",
            Self::Memory => "memory",
            Self::Launches => "launches/s",
            Self::Pid => "pid",
            Self::User => "user",
        }
    }
}

/// What the frame shows besides the sweep.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// What the process table is sorted by.
    pub sort: Sort,
    /// Windows judged so far, and the engine's age.
    pub windows: u64,
    /// Seconds the windows so far lasted, added up.
    pub age_s: f64,
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "?".into(), |b| format!("{:.1}G", b as f64 / f64::from(1u32 << 30)))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}%"))
}

fn launches_per_s(p: &Process, window_s: f64) -> Option<f64> {
    p.cuda.as_ref().map(|c| (c.kernels + c.graphs) as f64 / window_s.max(1e-9))
}

/// The processes in `sort` order, each job's workers folded under it: a job's row says how
/// many workers it has, and the workers get no row of their own.
#[must_use]
pub fn rows(report: &SweepReport, sort: Sort) -> Vec<(&Process, usize)> {
    let workers = |pid: u32| report.processes.iter().filter(|p| p.worker_of == Some(pid)).count();
    let window_s = report.window.duration_s;
    let mut rows: Vec<(&Process, usize)> = report.processes.iter().filter(|p| p.worker_of.is_none()).map(|p| (p, workers(p.pid))).collect();
    match sort {
        Sort::State => {}
        Sort::Memory => rows.sort_by_key(|r| std::cmp::Reverse(r.0.gpu_memory_bytes)),
        Sort::Launches => rows.sort_by(|a, b| launches_per_s(b.0, window_s).unwrap_or(0.0).total_cmp(&launches_per_s(a.0, window_s).unwrap_or(0.0))),
        Sort::Pid => rows.sort_by_key(|r| r.0.pid),
        Sort::User => rows.sort_by(|a, b| a.0.user.cmp(&b.0.user)),
    }
    rows
}

/// The diagnosis of a process, in a few words: the sweep's, where it has one.
fn verdict(report: &SweepReport, p: &Process) -> String {
    match report.diagnoses.iter().find(|d| d.pid == p.pid) {
        Some(d) => match d.impact {
            Some(i) => format!("{}: {:.0}% of GPU memory", clean(&d.id), i * 100.0),
            None => clean(&d.id),
        },
        None => match &p.judgement {
            Some(j) => match j.diagnoses.iter().find(|d| d.id == j.verdict) {
                Some(d) => format!("{} {:.0}%", clean(&d.id), d.ratio * 100.0),
                None => clean(&j.verdict),
            },
            None if p.state == "active" => "using the GPU".into(),
            None => String::new(),
        },
    }
}

/// Lines needed to show `report` whole (the batch mode's frame height).
#[must_use]
pub fn height(report: &SweepReport) -> u16 {
    let devices = report.gpu.as_ref().map_or(1, |g| g.devices.len().max(1));
    let processes = rows(report, Sort::State).len().max(1);
    u16::try_from(2 + devices + 3 + processes + 3 + 1).unwrap_or(u16::MAX)
}

/// Draw one frame.
pub fn draw(frame: &mut Frame<'_>, report: &SweepReport, status: &Status) {
    let devices = report.gpu.as_ref().map_or(1, |g| g.devices.len().max(1));
    let [head, gpus, procs, keys] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(u16::try_from(devices + 3).unwrap_or(u16::MAX)), Constraint::Min(3), Constraint::Length(1)])
            .areas(frame.area());
    let probes = if report.window.cuda_probes { "CUDA calls counted" } else { "CUDA calls NOT counted (see gputrace sweep -v)" };
    frame.render_widget(
        Paragraph::new(format!(
            "gputrace top — window {:.1} s, {} windows in {:.0} s; {probes}; gputrace used {:.2} s of CPU",
            report.window.duration_s, status.windows, status.age_s, report.tracer.cpu_s
        )),
        head,
    );

    let bold = Style::default().add_modifier(Modifier::BOLD);
    let gpu_rows: Vec<Row<'_>> = match &report.gpu {
        Some(g) => g
            .devices
            .iter()
            .map(|d| {
                Row::new(vec![
                    d.index.to_string(),
                    clean(&d.name),
                    pct(d.utilization_pct),
                    pct(d.sm_activity_pct),
                    format!("{} / {}", gib(d.memory_used_bytes), gib(d.memory_total_bytes)),
                    d.power_w.map_or_else(|| "-".into(), |w| format!("{w:.0} W")),
                    d.processes.to_string(),
                ])
            })
            .collect(),
        None => vec![Row::new(vec![String::new(), "no NVML: GPU figures unknown".into()])],
    };
    let gpu_table = Table::new(
        gpu_rows,
        [Constraint::Length(4), Constraint::Length(28), Constraint::Length(6), Constraint::Length(6), Constraint::Length(15), Constraint::Length(7), Constraint::Length(6)],
    )
    .header(Row::new(vec!["GPU", "NAME", "UTIL", "SM", "MEMORY", "POWER", "PROCS"]).style(bold))
        .block(Block::default().borders(Borders::TOP).title("GPUs"));
    frame.render_widget(gpu_table, gpus);

    let window_s = report.window.duration_s;
    let proc_rows: Vec<Row<'_>> = rows(report, status.sort)
        .into_iter()
        .map(|(p, workers)| {
            Row::new(vec![
                p.pid.to_string(),
                clean(&p.user),
                // Kubernetes' pod, else the container, else nothing.
                clean(p.pod.as_deref().or(p.container.as_deref()).unwrap_or_default()),
                clean(&p.state),
                gib(p.gpu_memory_bytes),
                launches_per_s(p, window_s).map_or_else(|| "-".into(), |l| format!("{l:.0}")),
                if workers > 0 { format!("+{workers}") } else { String::new() },
                verdict(report, p),
                clean(&p.command),
            ])
        })
        .collect();
    let empty = proc_rows.is_empty();
    let proc_table = Table::new(
        proc_rows,
        [
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(13),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(36),
            Constraint::Min(10),
        ],
    )
    .header(Row::new(vec!["PID", "USER", "POD", "STATE", "GPU MEM", "LAUNCH/S", "WORKERS", "DIAGNOSIS", "COMMAND"]).style(bold))
    .block(Block::default().borders(Borders::TOP).title(if empty { "GPU processes: none" } else { "GPU processes" }));
    frame.render_widget(proc_table, procs);
    frame.render_widget(
        Line::from(format!(
            "q quit · sort: s state, m memory, l launches/s, p pid, u user (now: {})",
            status.sort.name()
        )),
        keys,
    );
}

#[cfg(test)]
mod tests {
    use ratatui::{backend::TestBackend, Terminal};

    use super::*;

    fn report() -> SweepReport {
        let process = |pid: u32, state: &str, memory: Option<u64>, kernels: u64, worker_of: Option<u32>| {
            serde_json::json!({
                "pid": pid, "user": "ana", "uid": 1000, "command": format!("python3 job{pid}.py"), "command_hidden": false,
                "comm": "python3", "state": state, "process_state": "S", "parent": 1, "worker_of": worker_of, "orphaned": false,
                "cgroup": null, "container": null, "pod": null, "age_s": 10.0, "holds": ["nvml"], "device_files": [], "gpus": [],
                "gpu_memory_bytes": memory, "launches": kernels, "syncs": 0, "copies": 0, "last_activity_s": null,
                "cuda": {"kernels": kernels, "graphs": 0, "memsets": 0, "sync_wait_s": 0.0, "copy_bytes": 0, "allocs": 0,
                         "frees": 0, "allocated_in_window_bytes": 0, "contexts": [], "calls": kernels}
            })
        };
        serde_json::from_value(serde_json::json!({
            "schema": "gputrace.sweep/1", "tool": {"name": "gputrace", "version": "0"},
            "window": {"duration_s": 1.0, "stopped_by": "duration", "cuda_probes": true},
            "processes": [
                process(7, "idle", Some(20 << 30), 0, None),
                process(9, "active", Some(2 << 30), 5000, None),
                process(10, "worker", None, 0, Some(9)),
                process(11, "worker", None, 0, Some(9)),
            ],
            "diagnoses": [{"id": "idle-gpu-holder", "severity": "medium", "impact": 0.14, "pid": 7, "user": "ana",
                           "command": "python3", "state": "idle", "gpu_memory_bytes": 21_474_836_480u64, "summary": "", "evidence": [], "fix": ""}],
            "gpu": {"available": true, "driver_version": "1", "devices": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200",
                    "memory_total_bytes": 150_000_000_000u64, "memory_used_bytes": 23_000_000_000u64, "processes": 2,
                    "utilization_pct": 37.0, "sm_activity_pct": 21.0, "power_w": 412.4}]},
            "tracer": {"cpu_s": 0.5, "user_cpu_s": 0.4, "system_cpu_s": 0.1, "max_rss_bytes": 1000, "proc_scan_ms": 1.0, "proc_scans": 1,
                       "processes_scanned": 10, "processes_unreadable": 0, "fds_read": 0, "attach_ms": 1.0, "libraries": [],
                       "probe_hits": 5000, "lost_events": 0, "processes_hidden": false, "complete": true, "notes": []}
        }))
        .expect("a sweep report")
    }

    /// The frame as text lines.
    fn frame(report: &SweepReport, sort: Sort, width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
        terminal.draw(|f| draw(f, report, &Status { sort, windows: 3, age_s: 3.2 })).expect("drawn");
        let buffer = terminal.backend().buffer().clone();
        (0..height).map(|y| (0..width).map(|x| buffer[(x, y)].symbol().to_owned()).collect::<String>().trim_end().to_owned()).collect()
    }

    #[test]
    fn a_frame_shows_the_gpu_the_idle_holder_and_the_job_with_its_workers_folded() {
        let r = report();
        let lines = frame(&r, Sort::State, 140, height(&r));
        let text = lines.join("\n");
        assert!(lines.iter().any(|l| l.contains("NVIDIA H200") && l.contains("37%") && l.contains("21%") && l.contains("412 W")), "{text}");
        let idle = lines.iter().find(|l| l.trim_start().starts_with("7 ")).unwrap_or_else(|| panic!("{text}"));
        assert!(idle.contains("idle") && idle.contains("20.0G") && idle.contains("idle-gpu-holder: 14% of GPU memory"), "{idle}");
        let job = lines.iter().find(|l| l.trim_start().starts_with("9 ")).unwrap_or_else(|| panic!("{text}"));
        assert!(job.contains("active") && job.contains("5000") && job.contains(" +2 "), "{job}");
        // Workers have no row of their own.
        assert!(!lines.iter().any(|l| l.trim_start().starts_with("10 ") || l.trim_start().starts_with("11 ")), "{text}");
        assert!(text.contains("q quit"), "{text}");
    }

    #[test]
    fn sort_keys_reorder_the_rows() {
        let r = report();
        let order = |sort| rows(&r, sort).iter().map(|(p, _)| p.pid).collect::<Vec<_>>();
        assert_eq!(order(Sort::State), [7, 9]);
        assert_eq!(order(Sort::Launches), [9, 7]);
        assert_eq!(order(Sort::Memory), [7, 9]);
        assert_eq!(order(Sort::Pid), [7, 9]);
        let lines = frame(&r, Sort::Launches, 140, height(&r));
        let first = lines.iter().position(|l| l.trim_start().starts_with("9 ")).expect("the job");
        let second = lines.iter().position(|l| l.trim_start().starts_with("7 ")).expect("the holder");
        assert!(first < second);
        assert!(lines.last().is_some_and(|l| l.contains("now: launches/s")), "{lines:#?}");
    }

    #[test]
    fn a_tiny_terminal_still_draws() {
        let r = report();
        // 20×5 cells: cut short, no panic.
        let lines = frame(&r, Sort::State, 20, 5);
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn names_from_other_users_cannot_drive_the_terminal() {
        let mut r = report();
        r.processes[0].user = "ev\u{1b}]0;pwned\u{7}il".into();
        r.processes[0].command = "python3 \u{1b}[2J\u{1b}[H\u{202e}gpj.exe\r\njob".into();
        r.processes[0].pod = Some("pod\u{9b}31m".into());
        if let Some(g) = r.gpu.as_mut() {
            g.devices[0].name = "H200\u{1b}[5m".into();
        }
        let lines = frame(&r, Sort::State, 160, height(&r));
        let text = lines.join("\n");
        assert!(!text.chars().any(|c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c)), "{text:?}");
        let idle = lines.iter().find(|l| l.trim_start().starts_with("7 ")).unwrap_or_else(|| panic!("{text}"));
        assert!(idle.contains("ev?]0;pwne") && idle.contains("pod?31m") && idle.contains("python3 ?[2J?[H?gpj.exe??job"), "{idle}");
        // The plain text of a pipe, too.
        let plain = crate::top::render_text(&r, &Status::default());
        assert!(plain.contains("python3 ?[2J") && !plain.chars().any(|c| c.is_control() && c != '\n'), "{plain:?}");
    }
}
