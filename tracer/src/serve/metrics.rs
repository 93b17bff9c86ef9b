//! A sweep as OpenMetrics text (pure: a report in, the exposition out; unit-tested).
//!
//! The names are the contract's (docs/contract.md). Gauges describe the last window; counters
//! (`_total`) add up every window since `serve` started. Series come and go with processes:
//! the registry is built anew for each window, so a process that exited leaves no stale
//! series behind.
//!
//! Every label value passes through [`label`]: it is cut to [`MAX_LABEL_BYTES`] and escaped
//! as the text format requires, because `prometheus_client` (0.24) writes label values as
//! they are. A holder whose argv[0] holds a `"` or a `\` would otherwise make Prometheus
//! reject the whole scrape, and with `--full-command` a newline in an argument would forge
//! series of its own.

use std::sync::atomic::AtomicU64;

use prometheus_client::{
    encoding::text::encode,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::sweep::model::{Process, SweepReport};

/// What adds up over the windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// Windows judged since `serve` started.
    pub sweeps: u64,
    /// Records lost over all windows (`tracer.lost_events` added up).
    pub lost_events: u64,
    /// Probed CUDA calls over all windows (`tracer.probe_hits` added up).
    pub probe_hits: u64,
    /// The end of the last window, seconds since the Unix epoch.
    pub last_sweep_unix_s: f64,
}

impl Totals {
    /// Count one more window, `report`, which ended at `ended_unix_s` (seconds since the Unix
    /// epoch).
    pub fn add(&mut self, report: &SweepReport, ended_unix_s: f64) {
        self.sweeps += 1;
        self.lost_events += report.tracer.lost_events;
        self.probe_hits += report.tracer.probe_hits;
        self.last_sweep_unix_s = ended_unix_s;
    }
}

/// The most bytes of a label value kept (cut on a character boundary, before escaping). A
/// program name may be as long as a path (4 KiB) and appears in some ten series per
/// process; 128 bytes keep every real program name and a useful head of a command line.
pub const MAX_LABEL_BYTES: usize = 128;

/// `value` as a label value of the text format: at most [`MAX_LABEL_BYTES`] of it, with
/// backslash, double quote and line feed escaped (OpenMetrics 1.0, "ABNF": `escaped-string`;
/// Prometheus's text format 0.0.4 escapes the same three).
#[must_use]
pub fn label(value: &str) -> String {
    let mut end = value.len().min(MAX_LABEL_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 2);
    for c in value[..end].chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

type Labels = Vec<(&'static str, String)>;
type GaugeF = Gauge<f64, AtomicU64>;

/// The registry's families, each registered once.
struct Families {
    registry: Registry,
}

impl Families {
    fn gauge(&mut self, name: &str, help: &str) -> Family<Labels, GaugeF> {
        let family = Family::<Labels, GaugeF>::default();
        self.registry.register(name, help, family.clone());
        family
    }

    /// A gauge without labels.
    fn single(&mut self, name: &str, help: &str, value: f64) {
        let gauge = GaugeF::default();
        gauge.set(value);
        self.registry.register(name, help, gauge);
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let counter: Counter = Counter::default();
        counter.inc_by(value);
        self.registry.register(name, help, counter);
    }
}

/// The command label: the program's name, or the whole command line with `full_command`.
/// By default the name only: command lines carry paths, data set names and at times tokens,
/// which a metrics store keeps for months and shows to everyone with access to it; and each
/// distinct line is a new series.
fn command_label(p: &Process, full_command: bool) -> String {
    if full_command || p.command_hidden {
        return p.command.clone();
    }
    let first = p.command.split_whitespace().next().unwrap_or(&p.comm);
    first.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(&p.comm).to_owned()
}

fn process_labels(p: &Process, full_command: bool) -> Labels {
    vec![
        ("pid", p.pid.to_string()),
        ("user", label(&p.user)),
        ("command", label(&command_label(p, full_command))),
        ("container", label(p.container.as_deref().unwrap_or_default())),
        ("pod", label(p.pod.as_deref().unwrap_or_default())),
    ]
}

/// Bytes as a gauge value; NaN where unknown (NVML would not say).
fn bytes(b: Option<u64>) -> f64 {
    b.map_or(f64::NAN, |b| b as f64)
}

/// The exposition of `report`, with `totals` (this window included).
#[must_use]
pub fn exposition(report: &SweepReport, totals: &Totals, full_command: bool) -> String {
    let mut f = Families { registry: Registry::default() };
    if let Some(gpu) = &report.gpu {
        let util = f.gauge("gputrace_gpu_utilization_ratio", "Share of the last window some kernel ran on the GPU (NVML's samples)");
        let sm = f.gauge("gputrace_gpu_sm_activity_ratio", "Share of the GPU's SMs busy over the last window (GPM, Hopper and later)");
        let used = f.gauge("gputrace_gpu_memory_used_bytes", "GPU memory in use at the end of the last window");
        let total = f.gauge("gputrace_gpu_memory_total_bytes", "GPU memory in all");
        let power = f.gauge("gputrace_gpu_power_watts", "Mean board power over the last window");
        for d in &gpu.devices {
            let labels: Labels = vec![("gpu", d.index.to_string()), ("uuid", label(&d.uuid))];
            if let Some(u) = d.utilization_pct {
                util.get_or_create(&labels).set(u / 100.0);
            }
            if let Some(s) = d.sm_activity_pct {
                sm.get_or_create(&labels).set(s / 100.0);
            }
            if let Some(w) = d.power_w {
                power.get_or_create(&labels).set(w);
            }
            used.get_or_create(&labels).set(bytes(d.memory_used_bytes));
            total.get_or_create(&labels).set(bytes(d.memory_total_bytes));
        }
    }
    let memory = f.gauge(
        "gputrace_process_gpu_memory_bytes",
        "GPU memory a process holds on a GPU (NVML), NaN where NVML will not say",
    );
    let active = f.gauge(
        "gputrace_process_active",
        "1 if the process used the GPU in the last window, else 0; `state` says more (idle, zombie, worker, exited, unknown)",
    );
    let launches = f.gauge("gputrace_process_kernel_launches_per_second", "Kernel launches and graph replays a second over the last window (probes)");
    let window_s = report.window.duration_s.max(1e-9);
    for p in &report.processes {
        let labels = process_labels(p, full_command);
        for g in &p.gpus {
            let mut with_gpu = labels.clone();
            with_gpu.push(("gpu", g.index.to_string()));
            memory.get_or_create(&with_gpu).set(bytes(g.memory_bytes));
        }
        let mut with_state = labels.clone();
        with_state.push(("state", label(&p.state)));
        active.get_or_create(&with_state).set(if p.state == "active" { 1.0 } else { 0.0 });
        if let Some(k) = p.cuda.as_ref().map(|c| c.kernels + c.graphs) {
            launches.get_or_create(&labels).set(k as f64 / window_s);
        }
    }
    let diagnosis = f.gauge(
        "gputrace_job_diagnosis_ratio",
        "Share of a job's recent time (up to 30 s) one bottleneck costs its GPU, by attach's diagnosis id",
    );
    let verdict = f.gauge("gputrace_job_verdict", "1 for a job's verdict over its recent time (a diagnosis id, gpu-bound, paused or no-bottleneck-found)");
    let time = f.gauge(
        "gputrace_job_time_ratio",
        "Share of a job's recent time its launching threads spent in each part: host, waiting_on_gpu, in_copies, waiting_for_cpu, sleeping",
    );
    for p in &report.processes {
        let Some(j) = &p.judgement else { continue };
        let labels = process_labels(p, full_command);
        for d in &j.diagnoses {
            let mut with_id = labels.clone();
            with_id.push(("id", label(&d.id)));
            diagnosis.get_or_create(&with_id).set(d.ratio);
        }
        let mut with_verdict = labels.clone();
        with_verdict.push(("verdict", label(&j.verdict)));
        verdict.get_or_create(&with_verdict).set(1.0);
        let t = &j.time;
        for (part, share) in [("host", t.host), ("waiting_on_gpu", t.waiting_on_gpu), ("in_copies", t.in_copies), ("waiting_for_cpu", t.waiting_for_cpu), ("sleeping", t.sleeping)] {
            let mut with_part = labels.clone();
            with_part.push(("part", part.to_owned()));
            time.get_or_create(&with_part).set(share);
        }
    }
    let idle = f.gauge(
        "gputrace_idle_gpu_holder_bytes",
        "GPU memory held by a process that did not use the GPU in the last window (NaN where NVML will not say)",
    );
    for d in report.diagnoses.iter().filter(|d| d.id == "idle-gpu-holder") {
        if let Some(p) = report.processes.iter().find(|p| p.pid == d.pid) {
            idle.get_or_create(&process_labels(p, full_command)).set(bytes(d.gpu_memory_bytes));
        }
    }
    f.single("gputrace_sweep_duration_seconds", "Length of the last window judged", report.window.duration_s);
    f.single("gputrace_sweep_timestamp_seconds", "When the last window ended, seconds since the Unix epoch", totals.last_sweep_unix_s);
    f.single("gputrace_cuda_probes", "1 if CUDA calls are counted (probes loaded), else 0", if report.window.cuda_probes { 1.0 } else { 0.0 });
    f.single("gputrace_tracer_max_rss_bytes", "Peak resident memory of gputrace", report.tracer.max_rss_bytes as f64);
    let cpu: Counter<f64, AtomicU64> = Counter::default();
    cpu.inc_by(report.tracer.cpu_s);
    f.registry.register("gputrace_tracer_cpu_seconds", "CPU time gputrace itself used since it started (user and system)", cpu);
    f.counter("gputrace_sweeps", "Windows judged since gputrace started", totals.sweeps);
    f.counter("gputrace_lost_events", "Records the kernel could not hand over, all windows", totals.lost_events);
    f.counter("gputrace_probe_hits", "Probed CUDA calls on the host, all windows (each cost its caller a uprobe trap)", totals.probe_hits);
    let mut out = String::new();
    // Writing into a String cannot fail; an error here would be the encoder's own.
    if let Err(e) = encode(&mut out, &f.registry) {
        log::warn!("encoding the metrics: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judgement() -> serde_json::Value {
        serde_json::json!({
            "window_s": 30.0, "verdict": "input-starved",
            "time": {"host": 0.1, "waiting_on_gpu": 0.05, "in_copies": 0.0, "waiting_for_cpu": 0.0, "sleeping": 0.85},
            "sleep": null, "launches_per_s": 15.0, "syncs_per_s": 1.0, "threads": 1, "workers": 4, "workers_on_cpu": 0.9,
            "gpu_utilization": 0.4, "sm_activity": null,
            "diagnoses": [{"id": "input-starved", "ratio": 0.6, "summary": "", "fix": ""}]
        })
    }

    fn report() -> SweepReport {
        let process = |pid: u32, state: &str, command: &str, memory: Option<u64>| {
            serde_json::json!({
                "pid": pid, "user": "ana", "uid": 1000, "command": command, "command_hidden": false, "comm": "python3",
                "state": state, "process_state": "S", "parent": 1, "orphaned": false, "cgroup": null, "container": null,
                "pod": "p-1", "age_s": 10.0, "holds": ["nvml"], "device_files": [],
                "gpus": [{"index": 0, "uuid": "GPU-a", "memory_bytes": memory, "sm_util_pct": null}],
                "gpu_memory_bytes": memory, "launches": 30, "syncs": 0, "copies": 0, "last_activity_s": null,
                "cuda": {"kernels": 28, "graphs": 2, "memsets": 0, "sync_wait_s": 0.0, "copy_bytes": 0, "allocs": 0, "frees": 0,
                         "allocated_in_window_bytes": 0, "contexts": [], "calls": 30},
                "judgement": (state == "active").then(judgement)
            })
        };
        serde_json::from_value(serde_json::json!({
            "schema": "gputrace.sweep/1", "tool": {"name": "gputrace", "version": "0"},
            "window": {"duration_s": 2.0, "stopped_by": "duration", "cuda_probes": true},
            "processes": [
                process(7, "idle", "/opt/conda/bin/python3 notebook.py --token=secret", None),
                process(9, "active", "/usr/bin/python3 train.py", Some(1 << 30)),
            ],
            "diagnoses": [{"id": "idle-gpu-holder", "severity": "medium", "impact": null, "pid": 7, "user": "ana",
                           "command": "python3", "state": "idle", "gpu_memory_bytes": null, "summary": "", "evidence": [], "fix": ""}],
            "gpu": {"available": true, "driver_version": "1", "devices": [{"index": 0, "uuid": "GPU-a", "name": "H200",
                    "memory_total_bytes": 100, "memory_used_bytes": 50, "processes": 2, "utilization_pct": 40.0, "sm_activity_pct": null}]},
            "tracer": {"cpu_s": 1.5, "user_cpu_s": 1.0, "system_cpu_s": 0.5, "max_rss_bytes": 1000, "proc_scan_ms": 1.0, "proc_scans": 2,
                       "processes_scanned": 10, "processes_unreadable": 0, "fds_read": 0, "attach_ms": 1.0, "libraries": [],
                       "probe_hits": 30, "lost_events": 0, "processes_hidden": false, "complete": true, "notes": []}
        }))
        .expect("a sweep report")
    }

    #[test]
    fn the_contracts_series_carry_the_sweeps_values() {
        let r = report();
        let mut totals = Totals::default();
        totals.add(&r, 1_700_000_000.0);
        let text = exposition(&r, &totals, false);
        for line in [
            r#"gputrace_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.4"#,
            r#"gputrace_process_active{pid="9",user="ana",command="python3",container="",pod="p-1",state="active"} 1.0"#,
            r#"gputrace_process_active{pid="7",user="ana",command="python3",container="",pod="p-1",state="idle"} 0.0"#,
            r#"gputrace_process_gpu_memory_bytes{pid="9",user="ana",command="python3",container="",pod="p-1",gpu="0"} 1073741824.0"#,
            r#"gputrace_idle_gpu_holder_bytes{pid="7",user="ana",command="python3",container="",pod="p-1"} NaN"#,
            r#"gputrace_process_kernel_launches_per_second{pid="9",user="ana",command="python3",container="",pod="p-1"} 15.0"#,
            r#"gputrace_job_diagnosis_ratio{pid="9",user="ana",command="python3",container="",pod="p-1",id="input-starved"} 0.6"#,
            r#"gputrace_job_verdict{pid="9",user="ana",command="python3",container="",pod="p-1",verdict="input-starved"} 1.0"#,
            r#"gputrace_job_time_ratio{pid="9",user="ana",command="python3",container="",pod="p-1",part="sleeping"} 0.85"#,
            "gputrace_sweep_duration_seconds 2.0",
            "gputrace_sweeps_total 1",
            "gputrace_lost_events_total 0",
            "gputrace_tracer_cpu_seconds_total 1.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
        // No SM activity known: no series. No secret in a label by default.
        assert!(!text.contains("gputrace_gpu_sm_activity_ratio{"), "{text}");
        assert!(!text.contains("secret"), "{text}");
        // The idle holder has no judgement, so no series of one.
        assert!(!text.contains(r#"gputrace_job_verdict{pid="7""#), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn full_command_lines_only_when_asked() {
        let r = report();
        let text = exposition(&r, &Totals::default(), true);
        assert!(text.contains(r#"command="/opt/conda/bin/python3 notebook.py --token=secret""#), "{text}");
    }

    /// The label values of the samples of `family`, as a scraper reads them: unescaped.
    fn commands(text: &str, family: &str) -> Vec<String> {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&format!("{family}{{"))) {
            let rest = line.split_once("command=\"").expect("a command label").1;
            let mut value = String::new();
            let mut chars = rest.chars();
            loop {
                match chars.next().expect("a closing quote") {
                    '"' => break,
                    '\\' => match chars.next().expect("an escaped character") {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => panic!("an escape the format does not have: \\{c} in {line}"),
                    },
                    '\n' => panic!("a raw line feed in {line}"),
                    c => value.push(c),
                }
            }
            out.push(value);
        }
        out
    }

    #[test]
    fn quotes_backslashes_and_newlines_in_labels_are_escaped() {
        let mut r = report();
        r.processes[0].command = "/tmp/a\"b\\c/x\"y\\z --flag=\"v\"\ngputrace_sweeps_total 999".into();
        let text = exposition(&r, &Totals::default(), true);
        // Each line is a family's comment, a sample or the end: none forged.
        assert!(!text.contains("\ngputrace_sweeps_total 999"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("gputrace_sweeps_total ")).count(), 1, "{text}");
        let got = commands(&text, "gputrace_process_active");
        assert!(got.contains(&r.processes[0].command), "{got:?}\n{text}");
        // The program's name alone, by default, escaped too.
        let text = exposition(&r, &Totals::default(), false);
        assert!(commands(&text, "gputrace_process_active").contains(&"x\"y\\z".to_owned()), "{text}");
        assert!(text.contains(r#"command="x\"y\\z""#), "{text}");
    }

    #[test]
    fn labels_are_cut_to_a_bound_on_a_character_boundary() {
        assert_eq!(label(&"é".repeat(100)), "é".repeat(MAX_LABEL_BYTES / 2));
        // 127 ASCII bytes and a two-byte character straddling the bound: the character goes.
        let straddling = format!("{}é", "a".repeat(MAX_LABEL_BYTES - 1));
        assert_eq!(label(&straddling), "a".repeat(MAX_LABEL_BYTES - 1));
        assert_eq!(label("a\"b"), "a\\\"b");
        // A program name of 128 KiB (argv[0] may be that long) in some ten series per process.
        let mut r = report();
        r.processes[1].command = format!("/{} train.py", "n".repeat(128 << 10));
        let text = exposition(&r, &Totals::default(), false);
        let usual = exposition(&report(), &Totals::default(), false).len();
        assert!(text.len() <= usual + 16 * MAX_LABEL_BYTES, "{} bytes, against {usual}", text.len());
        assert!(commands(&text, "gputrace_process_active").iter().all(|c| c.len() <= MAX_LABEL_BYTES));
    }
}
