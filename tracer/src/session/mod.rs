//! A tracing session: pick the target, load and attach the probes, follow the process tree,
//! collect until a stop condition, and hand the evidence to the report. This is the only
//! place that sequences the stages; each stage lives in its own module.

pub mod budget_controller;
mod budget_loop;
mod snapshots;
mod drain;
mod mapped;
mod gpu_sampling;
pub mod progress;
mod recording;
mod target;

use budget_loop::Budgeting;
use mapped::{reap_gone, rescan_libraries};
use gpu_sampling::{finish_sampler, start_sampler};
use recording::Tape;

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use gputrace_common::{spec_of, Family};
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    clock,
    collect::{host_memory::ProcMaps, ring::RingReader},
    error::{Result, TraceError},
    evidence::Evidence,
    gpu::sampler::Sampler,
    outcome::{Outcome, StopReason},
    probes::ProbeSet,
    record::{
        format::{End, Trigger},
        Recorder,
    },
};

use snapshots::SnapshotReader;
use target::{forward_signal, wait_child, Exit};
pub use target::{gate_then_exec, Target, GATE_ARG};

const OWN_PID_NAMESPACE: &str = "gputrace runs in a pid namespace of its own (a container): NVML reports host pids, so GPU \
     memory and utilization cannot be matched to the traced processes by pid; the job's GPU is inferred from activity";

/// How often the status line is rewritten (on a terminal).
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// Detaching that takes longer than this is announced (on a terminal).
const DETACH_SAY_AFTER: Duration = Duration::from_millis(500);

/// How often the traced processes' memory maps are rescanned for CUDA libraries loaded
/// after attach (dlopen) and for processes that exited unseen.
const RESCAN_EVERY: Duration = Duration::from_millis(200);
/// How often the timeline is marked (`evidence::timeline`): where a start-up ends is known to
/// this much (the spacing doubles each time the timeline fills).
const MARK_EVERY: Duration = Duration::from_millis(50);
/// How often a recording is checkpointed and flushed: at most this much is lost when the
/// recorder is killed.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// How long `run` keeps tracing a command it passed a stopping signal to, so that its exit
/// (and its status) is part of the report; a second signal stops at once.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// Trace `target` until `duration`, a signal, or the end of the traced process tree; with a
/// `recorder`, everything the report needs is also written to it as it happens.
#[expect(clippy::too_many_lines, reason = "the trace loop reads best as one select over its sources")]
pub async fn trace(target: Target, duration: Option<Duration>, nvml_interval: Duration, recorder: Option<Recorder>, max_overhead: Option<f64>) -> Result<Outcome> {
    let began = Instant::now();
    let mut notes = Vec::new();
    // Privileges and kernel support first: without them nothing else is worth a message
    // (an NVML warning before the privilege error read as the failure).
    crate::preflight::check()?;
    // NVML next, so that its samples cover the whole window.
    let sampler = start_sampler(nvml_interval, &mut notes).await;
    let (mut kernel, ring) = ProbeSet::load()?;
    notes.extend(kernel.notes.iter().cloned());
    let ring = RingReader::new(ring).map_err(|e| TraceError::io("watching the ring buffer", "EVENTS", e))?;
    // The handlers go in before `run` starts its command: a stopping signal from then on is
    // held for the loop, which passes it on. Installed after the "armed" line, a SIGTERM
    // between the two killed gputrace and left the command running, orphaned, with our
    // stdout (CI, 2026-12-08: a test waited 50 minutes on it).
    let flight = recorder.as_ref().is_some_and(Recorder::is_flight);
    let (mut sigint, mut sigterm, mut sigusr1) = stopping_signals(flight)?;
    let attaching = Instant::now();
    let mut started = target.start(&mut kernel, &mut notes)?;
    kernel.startup.uprobes_ms = attaching.elapsed().as_secs_f64() * 1e3;
    let mut child = started.child.take();
    let mut exit: Option<Exit> = None;
    // Set once a stopping signal was passed to the command: tracing ends when it exits, or
    // at this instant.
    let mut grace_until: Option<tokio::time::Instant> = None;
    let attach_ms = began.elapsed().as_secs_f64() * 1e3;
    kernel.startup.total_ms = attach_ms;
    let start_ns = clock::monotonic_ns();
    let started_unix_s = unix_now_s();
    let pid = started.pid;
    let cuda_env = crate::gpu::identity::cuda_env_of(pid);
    let cpus = crate::discover::cpus::of(pid);
    let placement = crate::discover::cpus::placement(pid);
    if sampler.is_some() && crate::gpu::identity::in_child_pid_namespace() {
        notes.push(OWN_PID_NAMESPACE.into());
    }
    let mut progress = announce_armed(pid, &started.command, attach_ms, &kernel, &mut notes);
    let mut live = Live {
        snapshots: SnapshotReader::new(&kernel, pid),
        kernel,
        ring,
        evidence: Evidence::default(),
        host: ProcMaps::default(),
        tape: None,
        notes,
        sampler,
        start_ns,
        started_unix_s,
        budget: None,
    };
    if let Some(r) = recorder {
        live.begin_recording(r, &started.command, pid, attach_ms, &cuda_env, (cpus, placement.as_ref())).inspect_err(|_| progress.clear())?;
    }
    let deadline = tokio::time::sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut rescan = tokio::time::interval(RESCAN_EVERY);
    let mut mark_tick = tokio::time::interval(MARK_EVERY);
    mark_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut checkpoint_tick = tokio::time::interval_at(tokio::time::Instant::now() + CHECKPOINT_EVERY, CHECKPOINT_EVERY);
    let mut status_tick = tokio::time::interval_at(tokio::time::Instant::now() + STATUS_EVERY, STATUS_EVERY);

    started.go()?;
    max_overhead.inspect(|&limit| live.start_budget(limit));
    let stopped_by = loop {
        let budget_due = live.budget_due();
        tokio::select! {
            r = live.ring.readable() => {
                r.map_err(|e| TraceError::io("reading", "the ring buffer", e))?;
                live.drain();
            }
            () = &mut deadline => break StopReason::Duration,
            _ = sigint.recv() => if stop_on_signal(libc::SIGINT, child.as_ref(), &mut grace_until) { break StopReason::Signal },
            _ = sigterm.recv() => if stop_on_signal(libc::SIGTERM, child.as_ref(), &mut grace_until) { break StopReason::Signal },
            () = sleep_until_or_pend(grace_until) => {
                let note = format!("the command did not exit within {} s of the signal passed to it; it was left running", EXIT_GRACE.as_secs());
                log::warn!("{note}");
                live.notes.push(note);
                break StopReason::Signal;
            }
            status = wait_child(&mut child) => {
                exit = status;
                live.drain();
                reap_gone(&mut live.kernel);
                if grace_until.is_some() { break StopReason::Signal; }
                if live.kernel.traced_processes().is_empty() { break StopReason::TargetExited; }
            }
            _ = rescan.tick() => {
                live.rescan();
                if live.kernel.traced_processes().is_empty() { break StopReason::TargetExited; }
            }
            _ = mark_tick.tick() => live.mark_timeline(),
            _ = checkpoint_tick.tick(), if live.tape.is_some() => live.checkpoint(flight),
            _ = status_tick.tick(), if progress.enabled() => progress.tick(live.status()),
            () = sleep_until_or_pend(budget_due) => live.budget_step(),
            () = recv_or_pend(sigusr1.as_mut()) => {
                live.checkpoint(false);
                if let Some(t) = live.tape.as_mut() {
                    t.recorder.trigger(&Trigger { at_ns: clock::monotonic_ns(), reason: "signal".into(), ..Trigger::default() });
                }
            }
        }
    };
    let end_ns = clock::monotonic_ns();
    progress.clear();
    if exit.is_none() && stopped_by == StopReason::TargetExited {
        // The tree is gone; reap the command we started for its exit code.
        exit = tokio::time::timeout(Duration::from_secs(1), wait_child(&mut child)).await.ok().flatten();
    }
    let mut outcome = live.conclude(pid, end_ns, stopped_by, exit, nvml_interval).await;
    outcome.started_unix_s = started_unix_s;
    outcome.host = host_and_kernel().0;
    outcome.command = started.command;
    outcome.attach_ms = attach_ms;
    outcome.cuda_env = cuda_env;
    outcome.cpus = cpus;
    outcome.placement = placement;
    Ok(outcome)
}

/// The state of a session while it traces.
struct Live {
    kernel: ProbeSet,
    ring: RingReader,
    evidence: Evidence,
    host: ProcMaps,
    tape: Option<Tape>,
    snapshots: SnapshotReader,
    notes: Vec<String>,
    sampler: Option<Sampler>,
    start_ns: u64,
    /// Wall-clock time of `start_ns` (seconds since the epoch).
    started_unix_s: f64,
    /// `--max-overhead`: the controller, and the trap costs it was measured with.
    budget: Option<Budgeting>,
}

impl Live {
    /// The 200 ms housekeeping: read the ring, probe libraries loaded since, read the Python
    /// frames of processes that loaded CUDA, symbolize new stacks while their processes live,
    /// remember their mappings for after, and forget processes that are gone.
    fn rescan(&mut self) {
        self.drain();
        let samples = self.kernel.fold_copied_samples();
        rescan_libraries(&mut self.kernel);
        self.snapshots.follow_cuda_processes(&self.kernel);
        self.snapshots.symbolize_new_stacks(&self.kernel, &samples);
        self.snapshots.refresh_mappings(&self.kernel);
        reap_gone(&mut self.kernel);
    }

    /// Mark the CUDA threads' scheduler and launch counters now, where the timeline wants a
    /// mark at this tick (`evidence::timeline`). Each thread is looked up by key: the job may
    /// have hundreds of threads, a handful of which call CUDA. A thread gone already is
    /// marked with what its exit record folded in.
    fn mark_timeline(&mut self) {
        // A recording is marked at its checkpoints, which its replay marks at too: the same
        // marks, the same report (`recording.rs`).
        if self.tape.is_some() || !self.evidence.timeline.due() {
            return;
        }
        // The CUDA figures up to now, as the kernel's counters are read now.
        self.drain();
        let at = clock::monotonic_ns();
        let mut sched = Vec::new();
        let mut counters = Vec::new();
        for &tid in self.evidence.threads.keys() {
            // A thread gone already has its final figures: no lookup.
            if self.evidence.deaths.contains_key(&tid) {
                sched.extend(self.evidence.sched.get(&tid).cloned().map(|s| (tid, s)));
                continue;
            }
            let (c, s) = self.kernel.thread_now(tid);
            counters.extend(c.map(|c| (tid, c)));
            let closed = s.map(|s| crate::evidence::snapshot::SchedRaw::from(&s).closed_at(at));
            sched.extend(closed.or_else(|| self.evidence.sched.get(&tid).cloned()).map(|s| (tid, s)));
        }
        self.evidence.mark_timeline(at, &sched, &counters);
    }

    /// The counters of the live status line: the kernel's for live threads, plus those of
    /// threads that have exited.
    fn status(&self) -> progress::Status {
        let mut hits = self.evidence.hits();
        for (_, counters) in self.kernel.thread_counters() {
            for (id, &n) in counters.hits.iter().enumerate() {
                if n > 0 {
                    *hits.entry(id as u32).or_default() += n;
                }
            }
        }
        let is_launch = |id: u32| spec_of(id).is_some_and(|s| matches!(s.family, Family::Launch | Family::GraphLaunch));
        progress::Status {
            calls: hits.values().sum(),
            launches: hits.iter().filter(|&(&id, _)| is_launch(id)).map(|(_, n)| n).sum(),
            gpu_util_pct: self.sampler.as_ref().and_then(Sampler::latest_utilization),
            lost: self.kernel.losses().iter().sum(),
        }
    }

    fn drain(&mut self) {
        let execs = drain::drain_ring(&mut self.ring, &mut self.kernel, &mut self.evidence, &mut self.host, self.tape.as_mut(), self.snapshots.python());
        for pid in execs {
            self.snapshots.note_exec(pid);
            self.kernel.forget_unwinding(pid);
        }
        self.snapshots.note_allocating_processes(&self.evidence.allocs);
    }

    /// Fold in the final state, stop NVML, close the recording.
    async fn conclude(mut self, pid: u32, end_ns: u64, stopped_by: StopReason, exit: Option<Exit>, nvml_interval: Duration) -> Outcome {
        let exit_status = exit.map(|e| e.code);
        let exit_signal = exit.and_then(|e| e.signal);
        self.drain();
        // What the maps hold at the end: live threads' counters and scheduler accounting (their
        // open state closed at `end_ns`), who took the CPU, the cgroups' throttling since start.
        self.snapshots.learn_processes(self.evidence.processes.keys().copied());
        let last = self.snapshots.read(&self.kernel, end_ns, &self.evidence.allocs, &self.evidence.blocks);
        last.apply(&mut self.evidence, None, &BTreeSet::new());
        // Nothing more is read from the tracepoints: let the kernel close them while the
        // report is made.
        self.kernel.start_detaching_tracepoints();
        let sampling = self.conclude_budget(end_ns);
        self.notes.extend(self.snapshots.stack_notes());
        self.notes.extend(self.kernel.take_later_notes());
        let gpu = match self.sampler.take() {
            Some(sampler) => {
                let pids: Vec<u32> = self.evidence.pids().into_iter().chain(self.kernel.traced_processes()).chain([pid]).collect();
                let taken = self.tape.as_mut().map(|t| std::mem::take(&mut t.samples)).unwrap_or_default();
                finish_sampler(sampler, pids, &mut self.notes).await.map(|mut finished| {
                    if let Some(t) = self.tape.as_mut() {
                        t.recorder.samples(&finished.samples);
                    }
                    finished.samples.splice(0..0, taken);
                    (finished, nvml_interval)
                })
            }
            None => None,
        };
        // Measured after the window, so the job is not slowed while it is traced (or at the
        // start, for the overhead budget).
        let measured = match self.budget.as_ref().and_then(|b| b.costs.clone()) {
            Some(c) => Ok(c),
            None => self.kernel.measure_trap_costs(),
        };
        let trap_costs = match measured {
            Ok(mut c) => {
                c.program_ns = self.kernel.program_costs();
                // The threads the model charges: those that hit a probe.
                let hit = |tid: u32| self.evidence.threads.get(&tid).is_some_and(|t| t.hits.iter().any(|&h| h > 0));
                c.sampled = self.kernel.trap_sampling_of(hit);
                Some(c)
            }
            Err(why) => {
                let note = format!("the cost of a probe could not be measured ({why}); the overhead estimate assumes 1 µs a trap");
                log::warn!("{note}");
                self.notes.push(note);
                None
            }
        };
        let usage = crate::usage::now();
        let peak_rss_bytes = usage.map(|u| u.peak_rss_bytes);
        let cpu_s = usage.map(|u| u.user_s + u.system_s);
        let entry_only = self.kernel.entry_only;
        let written = self.tape.take().map(|t| {
            let end = End {
                end_ns,
                stopped_by: stopped_by.as_str().into(),
                exit_status,
                exit_signal,
                trap_costs: trap_costs.clone(),
                gpu_devices: gpu.as_ref().map(|(g, _)| g.devices.clone()),
                gpu_holders: gpu.as_ref().map(|(g, _)| g.holders.clone()).unwrap_or_default(),
                peak_rss_bytes,
                cpu_s,
                checkpoint: snapshots::checkpoint(last, &self.kernel, &self.evidence, &self.notes, self.host.reads),
            };
            t.recorder.end(&end)
        });
        Outcome {
            sched_traced: self.kernel.sched_traced,
            io_traced: self.kernel.io_traced,
            gpu,
            evidence: self.evidence,
            target_pid: pid,
            command: String::new(),
            exit_status,
            exit_signal,
            trap_costs,
            start_ns: self.start_ns,
            end_ns,
            stopped_by,
            libraries: self.kernel.attached_libraries(),
            losses: self.kernel.losses(),
            startup: Some(self.kernel.startup),
            uprobe_links: Some(self.kernel.uprobe_link_kind()),
            probes: Some(self.kernel),
            attach_ms: 0.0,
            notes: self.notes,
            maps_reads: self.host.reads,
            recording: None,
            written,
            cuda_env: crate::model::CudaEnv::default(),
            peak_rss_bytes,
            cpu_s,
            entry_only,
            started_unix_s: 0.0,
            host: String::new(),
            cpus: None,
            placement: None,
            sampling,
        }
    }
}

/// A stopping signal arrived: in `run`, pass it to the command and keep tracing until it
/// exits (true: stop now, when there is no command to wait for or this is the second signal).
fn stop_on_signal(signal: i32, child: Option<&tokio::process::Child>, grace_until: &mut Option<tokio::time::Instant>) -> bool {
    if child.is_none() || grace_until.is_some() {
        return true;
    }
    let sent = forward_signal(child, signal);
    let name = if signal == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
    let how = if sent { format!("passed {name} to the command") } else { format!("the command got {name} from the terminal") };
    log::warn!("{how}; tracing until it exits (at most {} s; signal again to stop now)", EXIT_GRACE.as_secs());
    *grace_until = Some(tokio::time::Instant::now() + EXIT_GRACE);
    false
}

/// SIGINT and SIGTERM stop the session; SIGUSR1 writes a flight recorder out (otherwise its
/// default action, terminate, stays).
fn stopping_signals(flight: bool) -> Result<(tokio::signal::unix::Signal, tokio::signal::unix::Signal, Option<tokio::signal::unix::Signal>)> {
    let install = |kind: SignalKind, name: &str| signal(kind).map_err(|e| TraceError::io("installing", format!("{name} handler"), e));
    Ok((
        install(SignalKind::interrupt(), "SIGINT")?,
        install(SignalKind::terminate(), "SIGTERM")?,
        if flight { Some(install(SignalKind::user_defined1(), "SIGUSR1")?) } else { None },
    ))
}

async fn sleep_until_or_pend(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next signal where one is wanted, else never.
async fn recv_or_pend(sig: Option<&mut tokio::signal::unix::Signal>) {
    match sig {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Host name and kernel release.
/// Wall-clock seconds since the epoch.
fn unix_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn host_and_kernel() -> (String, String) {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_owned()).unwrap_or_default();
    (read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/osrelease"))
}

/// Say the probes are armed: the log line (tests and scripts wait for it, with -v), a note
/// if the driver is not loaded yet, and the start line on a terminal.
fn announce_armed(pid: u32, command: &str, attach_ms: f64, kernel: &ProbeSet, notes: &mut Vec<String>) -> progress::Progress {
    log::info!("armed: tracing pid {pid} with probes in {} libraries after {attach_ms:.0} ms", kernel.attached_libraries().len());
    if kernel.attached_libraries().is_empty() {
        let note = format!("process {pid} has not loaded the CUDA driver (libcuda) yet; waiting for it to be loaded");
        log::warn!("{note}");
        notes.push(note);
    }
    let mut progress = progress::Progress::for_terminal();
    progress.started(&start_line(pid, command, kernel));
    progress
}

/// `tracing pid 4242 (python train.py): 63 probes in libcuda.so.1 — Ctrl-C to stop`
fn start_line(pid: u32, command: &str, kernel: &ProbeSet) -> String {
    let mut shown: String = command.chars().take(60).collect();
    if shown.len() < command.len() {
        shown.push('…');
    }
    let libraries = kernel.attached_libraries();
    let probes: usize = libraries.iter().map(|l| l.symbols.len()).sum();
    let names: Vec<&str> = libraries.iter().map(|l| l.library.name.rsplit('/').next().unwrap_or(&l.library.name)).collect();
    let what = if libraries.is_empty() { "waiting for it to load libcuda".to_owned() } else { format!("{probes} probes in {}", names.join(", ")) };
    format!("tracing pid {pid} ({}): {what} — Ctrl-C to stop", crate::output::clean(&shown))
}

impl Outcome {
    /// Remove the probes, after the report is out. With multi-uprobe links this takes about
    /// a grace period; with perf-event uprobes each removal waits its turn in the kernel
    /// (13–14 s for the real libcuda's 63 probes, docs/benchmarks.md), so printing first
    /// means the user never waits for the report. (Detaching from a forked child instead let
    /// consecutive sessions contend in the kernel and hung a run on the GPU machine; not done.)
    pub fn detach(&mut self) {
        let Some(kernel) = self.probes.take() else { return };
        // The report is out: a second Ctrl-C (or SIGTERM) while detaching ends gputrace at
        // once, as it would without our handlers.
        // SAFETY: restoring the default disposition; nothing waits on these signals any more.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
        }
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            std::thread::sleep(DETACH_SAY_AFTER);
            if !watch.load(std::sync::atomic::Ordering::Relaxed) && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!("gputrace: detaching the probes… (Ctrl-C to leave now)");
            }
        });
        kernel.detach();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
