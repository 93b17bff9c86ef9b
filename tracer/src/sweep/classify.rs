//! Judging each process (pure): its state, and the `idle-gpu-holder` diagnosis for the ones
//! that hold a GPU without using it. Definitions are in docs/sweep.md; keep them in step.

use crate::severity::Severity;
use super::{
    model::{Diagnosis, Process},
    privacy::escape,
};
use crate::output::wrap::bytes;

/// States in the order the report lists them: rogue holders first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// Process state `Z`, or orphaned (adopted by init) while holding the GPU idle.
    Zombie,
    /// Holds a GPU (context, memory, driver or device file) and made no CUDA call.
    Idle,
    /// Holds a GPU; whether it worked cannot be told (no probes and no NVML samples).
    Unknown,
    /// Made CUDA calls in the window (or NVML sampled it running).
    Active,
    /// A child of a GPU job that made no CUDA call and that NVML does not list: it inherited
    /// the driver's mappings through `fork` (a DataLoader worker) and holds no context.
    Worker,
    /// Worked or held a GPU during the window and exited before its end.
    Exited,
}

impl State {
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Zombie => "zombie",
            Self::Idle => "idle",
            Self::Unknown => "unknown",
            Self::Active => "active",
            Self::Worker => "worker",
            Self::Exited => "exited",
        }
    }
}

/// What the state is decided from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Still there at the end of the window.
    pub alive: bool,
    /// `/proc` state letter at the end.
    pub proc_state: Option<char>,
    /// Whether it did CUDA work in the window; None where that cannot be known.
    pub worked: Option<bool>,
    /// Holds the GPU by some sign (NVML, device file, driver mapped).
    pub holds: bool,
    pub orphaned: bool,
}

#[must_use]
pub fn classify(f: Facts) -> State {
    if !f.alive {
        return State::Exited;
    }
    if matches!(f.proc_state, Some('Z' | 'X')) {
        return State::Zombie;
    }
    match f.worked {
        Some(true) => State::Active,
        Some(false) if f.orphaned && f.holds => State::Zombie,
        Some(false) => State::Idle,
        None => State::Unknown,
    }
}

/// Orphaned: re-parented to init. (A child subreaper such as `systemd --user` adopts
/// orphans too; `/proc` does not say which processes are subreapers, so only pid 1 counts.)
#[must_use]
pub fn orphaned(ppid: u32) -> bool {
    ppid == 1
}

const GIB: u64 = 1 << 30;

/// `idle-gpu-holder` for an idle or zombie process with a sign of a CUDA context or GPU
/// memory. Processes that only have a device file open (NVML clients such as `nvidia-smi`,
/// exporters, `nvidia-persistenced`) hold no context and are not blamed.
#[must_use]
pub fn idle_gpu_holder(p: &Process, window_s: f64, device_total: Option<u64>) -> Option<Diagnosis> {
    let state = p.state.as_str();
    if state != State::Idle.name() && state != State::Zombie.name() {
        return None;
    }
    let has = |sign: &str| p.holds.iter().any(|h| h == sign);
    let (nvml, mapped, libcuda) = (has("nvml"), has("device-mapped"), has("libcuda"));
    if !(nvml || mapped || libcuda) {
        return None;
    }
    // NVML answered and does not list it: it holds no GPU memory and no context, whatever
    // it maps (a process that only initialised the driver, or one that inherited a parent's
    // mappings through fork).
    if !nvml && p.gpu_memory_bytes == Some(0) {
        return None;
    }
    let memory = p.gpu_memory_bytes.filter(|&m| m > 0);
    let zombie = state == State::Zombie.name();
    let severity = if memory.is_some_and(|m| m >= GIB) || (zombie && (nvml || mapped)) {
        Severity::High
    } else if memory.is_some() || nvml || mapped {
        Severity::Medium
    } else {
        Severity::Low
    };
    let command = short_command(&p.command);
    let what = match memory {
        Some(m) => format!("holds {} of GPU memory", bytes(m)),
        None if nvml || mapped => "holds a CUDA context (its memory is unknown without NVML)".to_owned(),
        None => "has the CUDA driver loaded (whether it holds GPU memory is unknown without NVML)".to_owned(),
    };
    let why = match (state, p.process_state.as_deref()) {
        (_, Some("Z" | "X")) => " and is a zombie (it exited; its parent has not reaped it)".to_owned(),
        ("zombie", _) => " and is orphaned (its parent exited; init adopted it)".to_owned(),
        _ => String::new(),
    };
    let summary = format!("pid {} ({}, {command}) {what} and made no CUDA call in the {window_s:.1} s window{why}", p.pid, p.user);
    let mut evidence = Vec::new();
    for g in &p.gpus {
        let mem = g.memory_bytes.map_or_else(|| "memory unknown".to_owned(), bytes);
        evidence.push(format!("NVML: {mem} on GPU {} ({})", g.index, escape(&g.uuid)));
    }
    if !p.device_files.is_empty() {
        let how = if mapped { "maps" } else { "has open" };
        evidence.push(format!("{how} {}", p.device_files.iter().map(|d| format!("/dev/{d}")).collect::<Vec<_>>().join(", ")));
    }
    if libcuda {
        evidence.push("maps the CUDA driver (libcuda)".to_owned());
    }
    if let Some(age) = p.age_s {
        evidence.push(format!("running for {}", duration(age)));
    }
    if let Some(c) = &p.container {
        evidence.push(format!("in container {c}"));
    }
    if let Some(pod) = &p.pod {
        evidence.push(format!("in Kubernetes pod {pod}"));
    }
    if p.command_hidden {
        evidence.push("command line hidden (another user's; run as root or with --show-commands)".to_owned());
    }
    let frees = memory.map_or_else(|| "its GPU memory".to_owned(), bytes);
    let fix = if p.process_state.as_deref() == Some("Z") {
        format!(
            "ask the owner of its parent (pid {}) to reap it; if the memory stays held, the driver is still tearing it down",
            p.parent.map_or_else(|| "?".to_owned(), |x| x.to_string())
        )
    } else {
        format!("ask {} whether pid {} ({command}) still needs the GPU; ending it frees {frees}. gputrace kills nothing", p.user, p.pid)
    };
    Some(Diagnosis {
        id: "idle-gpu-holder".to_owned(),
        severity,
        impact: memory.zip(device_total.filter(|&t| t > 0)).map(|(m, t)| (m as f64 / t as f64).min(1.0)),
        pid: p.pid,
        user: p.user.clone(),
        command: p.command.clone(),
        state: p.state.clone(),
        gpu_memory_bytes: p.gpu_memory_bytes,
        summary,
        evidence,
        fix,
    })
}

/// A command line short enough for a sentence: the program's file name, then the
/// arguments, escaped and cut at 60 characters (the whole line is in the row's `command`).
#[must_use]
pub fn short_command(command: &str) -> String {
    let (program, args) = command.split_once(' ').unwrap_or((command, ""));
    let program = program.rsplit('/').next().filter(|p| !p.is_empty()).unwrap_or(program);
    let short = escape(format!("{program} {args}").trim_end());
    if short.chars().count() <= 60 {
        short
    } else {
        short.chars().take(59).chain(['…']).collect()
    }
}

/// `3 h 12 min`, `4 min 10 s`, `12 s`.
#[must_use]
pub fn duration(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(alive: bool, proc_state: char, worked: Option<bool>, holds: bool, orphaned: bool) -> Facts {
        Facts { alive, proc_state: Some(proc_state), worked, holds, orphaned }
    }

    #[test]
    fn states() {
        assert_eq!(classify(facts(true, 'S', Some(true), true, false)), State::Active);
        assert_eq!(classify(facts(true, 'S', Some(false), true, false)), State::Idle);
        // Orphaned and idle while holding: a likely leftover.
        assert_eq!(classify(facts(true, 'S', Some(false), true, true)), State::Zombie);
        // Orphaned but working (a daemonized server): active.
        assert_eq!(classify(facts(true, 'R', Some(true), true, true)), State::Active);
        // A real zombie, whatever else is known.
        assert_eq!(classify(facts(true, 'Z', Some(true), true, false)), State::Zombie);
        assert_eq!(classify(facts(true, 'Z', None, false, false)), State::Zombie);
        assert_eq!(classify(facts(false, 'S', Some(true), true, false)), State::Exited);
        // No probes and no NVML samples: we do not guess.
        assert_eq!(classify(facts(true, 'S', None, true, true)), State::Unknown);
        assert!(orphaned(1) && !orphaned(0) && !orphaned(4242));
        assert!(State::Zombie < State::Idle && State::Idle < State::Active);
    }

    fn process(state: &str, holds: &[&str], memory: Option<u64>) -> Process {
        Process {
            pid: 4242,
            user: "alice".into(),
            uid: Some(1000),
            command: "python serve.py\x1b[31m".into(),
            command_hidden: false,
            comm: "python".into(),
            state: state.into(),
            process_state: Some("S".into()),
            parent: Some(1),
            worker_of: None,
            orphaned: false,
            cgroup: None,
            container: None,
            pod: None,
            age_s: Some(7300.0),
            holds: holds.iter().map(|h| (*h).to_owned()).collect(),
            device_files: vec!["nvidia0".into()],
            gpus: Vec::new(),
            gpu_memory_bytes: memory,
            launches: Some(0),
            syncs: Some(0),
            copies: Some(0),
            last_activity_s: None,
            cuda: None,
            judgement: None,
        }
    }

    #[test]
    fn idle_holders_are_named_with_who_to_ask() {
        let d = idle_gpu_holder(&process("idle", &["nvml", "device-mapped"], Some(40 * GIB)), 5.0, Some(140 * GIB)).expect("diagnosed");
        assert_eq!((d.id.as_str(), d.severity.as_str(), d.pid), ("idle-gpu-holder", "high", 4242));
        assert!((d.impact.expect("known") - 40.0 / 140.0).abs() < 1e-9);
        assert!(d.summary.contains("40.0 GiB") && d.summary.contains("alice"), "{}", d.summary);
        assert!(d.fix.contains("ask alice") && d.fix.contains("kills nothing"), "{}", d.fix);
        // The hostile command is escaped in prose.
        assert!(!d.summary.chars().any(char::is_control) && !d.fix.chars().any(char::is_control));
        // A context without NVML: medium, impact unknown.
        let d = idle_gpu_holder(&process("idle", &["device-mapped"], None), 5.0, None).expect("diagnosed");
        assert_eq!((d.severity.as_str(), d.impact), ("medium", None));
        // NVML answered and does not list it: no memory, no context, not a holder.
        assert!(idle_gpu_holder(&process("idle", &["device-mapped", "libcuda"], Some(0)), 5.0, Some(140 * GIB)).is_none());
        // The driver loaded and nothing else known: low.
        let d = idle_gpu_holder(&process("idle", &["libcuda"], None), 5.0, None).expect("diagnosed");
        assert_eq!(d.severity, "low");
        // An orphaned holder with a context: high.
        let d = idle_gpu_holder(&process("zombie", &["device-mapped", "libcuda"], None), 5.0, None).expect("diagnosed");
        assert_eq!(d.severity, "high");
        assert!(d.summary.contains("orphaned"));
    }

    #[test]
    fn workers_tools_and_unknowns_are_not_blamed() {
        for (state, holds) in [
            ("active", &["nvml", "device-mapped"][..]),
            ("exited", &["libcuda"][..]),
            ("unknown", &["device-mapped"][..]),
            // An NVML client (nvidia-smi, an exporter) only has the device open.
            ("idle", &["device-open"][..]),
        ] {
            assert!(idle_gpu_holder(&process(state, holds, Some(GIB)), 5.0, None).is_none(), "{state} {holds:?}");
        }
    }

    #[test]
    fn commands_are_shortened_for_prose() {
        assert_eq!(short_command("/opt/venv/bin/python train.py --lr 0.1"), "python train.py --lr 0.1");
        assert_eq!(short_command("python"), "python");
        assert_eq!(short_command("/"), "/");
        assert_eq!(short_command(""), "");
        assert_eq!(short_command(&"a ".repeat(100)).chars().count(), 60);
        assert_eq!(short_command("x\x1b[2J"), "x\\u{1b}[2J");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(12.7), "12 s");
        assert_eq!(duration(250.0), "4 min 10 s");
        assert_eq!(duration(11_520.0), "3 h 12 min");
        assert_eq!(duration(200_000.0), "2 d 7 h");
        assert_eq!(duration(-3.0), "0 s");
    }
}
