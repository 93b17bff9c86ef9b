//! A tracing session: pick the target, load and attach the probes, follow the process tree,
//! collect until a stop condition, and hand the evidence to the report. This is the only
//! place that sequences the stages; each stage lives in its own module.

pub mod budget;
mod checkpoint;
pub mod progress;
mod target;

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use gputrace_common::{spec_of, Family};
use tokio::signal::unix::{signal, SignalKind};

use crate::{
    clock,
    collect::{host_memory::ProcMaps, ring::RingReader},
    decode::Event,
    discover::{libraries, process},
    error::{Result, TraceError},
    evidence::{Evidence, HostClass, HostMemory},
    gpu::{
        sampler::{Finished as GpuSamples, Sampler},
        Sample,
    },
    probes::Kernel,
    record::{
        format::{End, GpuStart, HostAnswer, Start, Trigger},
        Recorder, Written,
    },
    stacks::python::PythonSampler,
};

use checkpoint::SnapshotReader;
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
/// How often a recording is checkpointed and flushed: at most this much is lost when the
/// recorder is killed.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// How long `run` keeps tracing a command it passed a stopping signal to, so that its exit
/// (and its status) is part of the report; a second signal stops at once.
const EXIT_GRACE: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    Duration,
    Signal,
    TargetExited,
    /// A recording file that ends because the recording went on in the next file.
    Rotated,
    /// A recording that ends without its end record (the recorder was killed, the disk filled).
    RecordingCut,
    /// A flight recorder's file written mid-session (on a signal or a diagnosis).
    FlightDump,
}

impl StopReason {
    /// The reason as recorded (`window.stopped_by`); unknown words read as a cut recording.
    #[must_use]
    pub fn parse(s: &str) -> Self {
        match s {
            "duration" => Self::Duration,
            "signal" => Self::Signal,
            "target-exited" => Self::TargetExited,
            "rotated" => Self::Rotated,
            "flight-dump" => Self::FlightDump,
            _ => Self::RecordingCut,
        }
    }

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Duration => "duration",
            Self::Signal => "signal",
            Self::TargetExited => "target-exited",
            Self::Rotated => "rotated",
            Self::RecordingCut => "recording-cut",
            Self::FlightDump => "flight-dump",
        }
    }
}

/// Where a report's evidence came from when it was read from a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RecordingNote {
    pub file: String,
    /// `file` or `flight`.
    pub mode: String,
    pub segment: u32,
    pub from_session_start: bool,
    pub frames: u64,
    /// Frames the recorder could not write (a full disk).
    pub frames_dropped: u64,
    /// Where reading stopped early, and why.
    pub damage: Option<String>,
    /// Whether the file was closed properly (an end record, or a flight recorder's dump):
    /// a file without one ends at the recorder's last flush.
    pub closed: bool,
}

/// Everything a report needs from a finished session.
#[derive(Debug)]
pub struct Outcome {
    pub evidence: Evidence,
    pub target_pid: u32,
    pub command: String,
    pub exit_status: Option<i32>,
    /// The signal that killed the command, if one did.
    pub exit_signal: Option<i32>,
    /// What a uprobe trap cost here, measured at the end; None where it could not be.
    pub trap_costs: Option<crate::probes::trap_cost::TrapCosts>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stopped_by: StopReason,
    pub libraries: Vec<crate::probes::AttachedLibrary>,
    pub losses: [u64; gputrace_common::loss::COUNT as usize],
    pub attach_ms: f64,
    /// Where the start-up time went, and how the uprobes were attached (live sessions, and
    /// recordings that carry them).
    pub startup: Option<crate::probes::Startup>,
    pub uprobe_links: Option<crate::probes::uprobes::LinkKind>,
    pub notes: Vec<String>,
    pub maps_reads: u64,
    /// Whether scheduler and block evidence were collected.
    pub sched_traced: bool,
    pub io_traced: bool,
    /// The probes, still attached: detached by `detach` once the report is out.
    pub probes: Option<Kernel>,
    /// NVML samples, and the sampling interval; None where NVML is unavailable.
    pub gpu: Option<(GpuSamples, Duration)>,
    /// Set when the outcome was read back from a recording.
    pub recording: Option<RecordingNote>,
    /// What a live session wrote to its recording.
    pub written: Option<Written>,
    /// The target's CUDA device environment.
    pub cuda_env: crate::gpu::identity::CudaEnv,
    /// gputrace's own peak resident memory at the end of tracing (`VmHWM`).
    pub peak_rss_bytes: Option<u64>,
    /// gputrace's own CPU time (user + system) from its start to the end of tracing.
    pub cpu_s: Option<f64>,
    /// Return probes were off (calls counted, not timed).
    pub entry_only: bool,
    /// Wall-clock time tracing began, seconds since the epoch, and the host it ran on.
    pub started_unix_s: f64,
    pub host: String,
    /// What `--max-overhead` did; None without it.
    pub sampling: Option<budget::Sampling>,
}

/// Trace `target` until `duration`, a signal, or the end of the traced process tree; with a
/// `recorder`, everything the report needs is also written to it as it happens.
pub async fn trace(target: Target, duration: Option<Duration>, nvml_interval: Duration, recorder: Option<Recorder>, max_overhead: Option<f64>) -> Result<Outcome> {
    let began = Instant::now();
    let mut notes = Vec::new();
    // NVML first, so that its samples cover the whole window.
    let sampler = start_sampler(nvml_interval, &mut notes).await;
    let (mut kernel, ring) = Kernel::load()?;
    notes.extend(kernel.notes.iter().cloned());
    let ring = RingReader::new(ring).map_err(|e| TraceError::io("watching the ring buffer", "EVENTS", e))?;
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
    let cuda_env = crate::gpu::identity::CudaEnv::of(pid);
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
        live.begin_recording(r, &started.command, pid, attach_ms, &cuda_env);
    }
    let flight = live.tape.as_ref().is_some_and(|t| t.recorder.is_flight());
    let (mut sigint, mut sigterm, mut sigusr1) = stopping_signals(flight)?;
    let deadline = tokio::time::sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut rescan = tokio::time::interval(RESCAN_EVERY);
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
    Ok(outcome)
}

/// The state of a session while it traces.
struct Live {
    kernel: Kernel,
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

/// The overhead budget while it runs.
struct Budgeting {
    controller: budget::Budget,
    /// Trap costs measured at the start (reused for the report's estimate).
    costs: Option<crate::probes::trap_cost::TrapCosts>,
    /// Threads closing launch links taken off (a grace period each, off the loop).
    closing: Vec<std::thread::JoinHandle<()>>,
}

impl Live {
    /// The 200 ms housekeeping: read the ring, probe libraries loaded since, read the Python
    /// frames of processes that loaded CUDA, symbolize new stacks while their processes live,
    /// and forget processes that are gone.
    fn rescan(&mut self) {
        self.drain();
        rescan_libraries(&mut self.kernel);
        self.snapshots.follow_cuda_processes(&self.kernel);
        self.snapshots.symbolize_new_stacks(&self.kernel);
        reap_gone(&mut self.kernel);
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

    /// Start the overhead budget: the trap costs are measured now (the controller needs
    /// them), where the launch probes can be taken off cheaply.
    fn start_budget(&mut self, limit: f64) {
        if !self.kernel.can_shed_launches() {
            self.notes.push(format!(
                "--max-overhead {}: not applied: taking the launch probes off and on needs multi-uprobe links (Linux ≥ 6.6), \
                 which this session does not use (tracer.uprobe_links)",
                limit * 100.0
            ));
            return;
        }
        let costs = self.kernel.measure_trap_costs().map_err(|why| log::warn!("trap costs for the budget: {why}; 1 µs a trap assumed")).ok();
        let controller = budget::Budget::new(limit, clock::monotonic_ns(), &self.kernel.thread_counters());
        self.budget = Some(Budgeting { controller, costs, closing: Vec::new() });
    }

    fn budget_due(&self) -> Option<tokio::time::Instant> {
        let b = self.budget.as_ref()?;
        let wait = b.controller.next_step_ns().saturating_sub(clock::monotonic_ns());
        Some(tokio::time::Instant::now() + Duration::from_nanos(wait))
    }

    /// Measure what the probes cost since the last step; take the launch probes off or put
    /// them back as the controller says.
    fn budget_step(&mut self) {
        let Some(b) = self.budget.as_mut() else { return };
        let costs = crate::probes::trap_cost::hit_ns(&self.kernel.attached_libraries(), b.costs.as_ref(), self.kernel.entry_only);
        let now = clock::monotonic_ns();
        let counters = self.kernel.thread_counters();
        match b.controller.step(now, &counters, &costs) {
            budget::Action::None => {}
            budget::Action::Shed => {
                let links = self.kernel.shed_launches();
                self.evidence.launch_probes_off(now, &counters);
                b.closing.push(std::thread::spawn(move || crate::probes::uprobes::drop_all(links)));
            }
            budget::Action::Restore => {
                // The links taken off are closed first: an old link still closing beside its
                // new one would count the same launches twice.
                for t in b.closing.drain(..) {
                    let _ = t.join();
                }
                // Nothing went back (every file gone): launches stay unseen, and the time
                // stays off.
                if self.kernel.restore_launches() > 0 || !self.kernel.has_launch_sites() {
                    self.evidence.launch_probes_on(clock::monotonic_ns());
                }
            }
        }
    }

    /// What the budget did, once the last counters are in: launches scaled to the window.
    fn conclude_budget(&mut self, end_ns: u64) -> Option<budget::Sampling> {
        let b = self.budget.as_mut()?;
        for t in b.closing.drain(..) {
            let _ = t.join();
        }
        let on_fraction = self.evidence.scale_sampled_launches(self.start_ns, end_ns).unwrap_or(1.0);
        let s = budget_report(&b.controller, &self.kernel.attached_libraries(), on_fraction, self.evidence.spells_unseen);
        if s.on_fraction < 1.0 {
            self.notes.push(format!(
                "--max-overhead {}: the launch probes were on {:.1}% of the window ({} periods); launch counts, launch rates and \
                 empty-queue spells are estimates scaled from then, every other count is exact",
                s.max_overhead_pct,
                s.on_fraction * 100.0,
                s.cycles
            ));
        }
        Some(s)
    }

    fn drain(&mut self) {
        drain(&mut self.ring, &mut self.kernel, &mut self.evidence, &mut self.host, self.tape.as_mut(), self.snapshots.python());
        self.snapshots.note_allocating_processes(&self.evidence.allocs);
    }

    fn begin_recording(&mut self, mut r: Recorder, command: &str, pid: u32, attach_ms: f64, cuda_env: &crate::gpu::identity::CudaEnv) {
        let mut start = start_record(&self.kernel, command, pid, self.start_ns, attach_ms, self.sampler.as_ref());
        // The same instant as the live report's `started_at`, so that both reports agree.
        start.started_unix_s = self.started_unix_s;
        start.cuda_env = cuda_env.clone();
        r.begin(start);
        // The first checkpoint: a baseline for files that do not start with the session.
        let first = self.snapshots.read(&self.kernel, self.start_ns, &self.evidence.allocs);
        r.checkpoint(checkpoint::checkpoint(first, &self.kernel, &self.evidence, &self.notes, 0), &[]);
        self.tape = Some(Tape { recorder: r, samples: Vec::new(), diagnosis_fired: false });
    }

    /// Write a recording checkpoint; a flight recorder also diagnoses the window so far.
    fn checkpoint(&mut self, diagnose: bool) {
        self.drain();
        let Some(t) = self.tape.as_mut() else { return };
        self.snapshots.learn_processes(self.evidence.processes.keys().copied());
        let snapshot = self.snapshots.read(&self.kernel, clock::monotonic_ns(), &self.evidence.allocs);
        let fresh = self.sampler.as_ref().map(Sampler::take_samples).unwrap_or_default();
        t.samples.extend(fresh.iter().cloned());
        let cp = checkpoint::checkpoint(snapshot, &self.kernel, &self.evidence, &self.notes, self.host.reads);
        // The checkpoint goes first: a dump that follows must hold the counters up to now.
        t.recorder.checkpoint(cp.clone(), &fresh);
        if diagnose && !t.diagnosis_fired {
            t.check_diagnosis(&self.evidence, &cp.snapshot, self.start_ns, self.sampler.as_ref());
        }
    }

    /// Fold in the final state, stop NVML, close the recording.
    async fn conclude(mut self, pid: u32, end_ns: u64, stopped_by: StopReason, exit: Option<Exit>, nvml_interval: Duration) -> Outcome {
        let exit_status = exit.map(|e| e.code);
        let exit_signal = exit.and_then(|e| e.signal);
        self.drain();
        // What the maps hold at the end: live threads' counters and scheduler accounting (their
        // open state closed at `end_ns`), who took the CPU, the cgroups' throttling since start.
        self.snapshots.learn_processes(self.evidence.processes.keys().copied());
        let last = self.snapshots.read(&self.kernel, end_ns, &self.evidence.allocs);
        last.apply(&mut self.evidence, None, &BTreeSet::new());
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
            Ok(c) => Some(c),
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
                checkpoint: checkpoint::checkpoint(last, &self.kernel, &self.evidence, &self.notes, self.host.reads),
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
            cuda_env: crate::gpu::identity::CudaEnv::default(),
            peak_rss_bytes,
            cpu_s,
            entry_only,
            started_unix_s: 0.0,
            host: String::new(),
            sampling,
        }
    }
}

/// The report's view of what the budget did.
fn budget_report(controller: &budget::Budget, libraries: &[crate::probes::AttachedLibrary], on_fraction: f64, spells_unseen: u64) -> budget::Sampling {
    let probed = |symbol: &str| libraries.iter().any(|l| l.symbols.contains(&symbol));
    budget::Sampling {
        max_overhead_pct: controller.limit() * 100.0,
        probes: gputrace_common::PROBES
            .iter()
            .filter(|p| matches!(p.family, Family::Launch | Family::GraphLaunch) && probed(p.symbol))
            .map(|p| p.symbol.to_owned())
            .collect(),
        on_fraction,
        cycles: controller.cycles,
        estimated_overhead_pct: controller.estimate * 100.0,
        // Set by the report, from the window's estimate.
        met: !controller.unmet,
        achievable: !controller.unmet,
        spells_unseen,
    }
}

/// A recording in progress, with what the session keeps for it.
struct Tape {
    recorder: Recorder,
    /// NVML samples taken off the sampler at checkpoints (for the live report too).
    samples: Vec<Sample>,
    /// A flight recorder writes itself out once when a serious problem shows.
    diagnosis_fired: bool,
}

impl Tape {
    /// Diagnose the window so far; a `high` problem writes the flight recorder out.
    fn check_diagnosis(&mut self, ev: &Evidence, snapshot: &crate::evidence::snapshot::Snapshot, start_ns: u64, sampler: Option<&Sampler>) {
        let mut so_far = ev.clone();
        snapshot.apply(&mut so_far, None, &BTreeSet::new());
        let cx = crate::gpu::Context { start_ns, end_ns: snapshot.at_ns, ..crate::gpu::Context::default() };
        let devices = sampler.map(|s| crate::gpu::summarize(&s.devices, &self.samples, &cx));
        let window_ns = snapshot.at_ns.saturating_sub(start_ns);
        let (verdict, diagnoses) = crate::detect::diagnose(&crate::detect::Inputs { window_ns, evidence: &so_far, gpu: devices.as_deref() });
        if let Some(d) = diagnoses.iter().find(|d| d.id == verdict && d.severity == crate::severity::Severity::High && d.id != "gpu-bound") {
            self.diagnosis_fired = true;
            log::info!("flight recorder: {} fired ({}); writing the buffer out", d.id, d.summary);
            self.recorder.trigger(&Trigger {
                at_ns: snapshot.at_ns,
                reason: "diagnosis".into(),
                diagnosis: Some(d.id.clone()),
                summary: Some(d.summary.clone()),
            });
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

fn start_record(kernel: &Kernel, command: &str, pid: u32, start_ns: u64, attach_ms: f64, sampler: Option<&Sampler>) -> Start {
    let uname = host_and_kernel();
    Start {
        format: "gputrace.recording/1".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: uname.0,
        kernel: uname.1,
        started_unix_s: unix_now_s(),
        start_ns,
        target_pid: pid,
        command: command.into(),
        attach_ms,
        startup: Some(kernel.startup),
        uprobe_links: Some(kernel.uprobe_link_kind()),
        sched_traced: kernel.sched_traced,
        io_traced: kernel.io_traced,
        gpu: sampler.map(|s| GpuStart {
            driver_version: s.driver_version.clone(),
            devices: s.devices.clone(),
            sample_interval_s: s.interval.as_secs_f64(),
        }),
        segment: 0,
        from_session_start: true,
        mode: String::new(),
        cuda_env: crate::gpu::identity::CudaEnv::default(),
        entry_only: kernel.entry_only,
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

/// Start NVML sampling; where that fails, say why in `notes` and trace without it.
async fn start_sampler(nvml_interval: Duration, notes: &mut Vec<String>) -> Option<Sampler> {
    match tokio::task::spawn_blocking(move || Sampler::start(nvml_interval)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(why)) => {
            log::warn!("{why}");
            notes.push(why);
            None
        }
        Err(e) => {
            notes.push(format!("the NVML sampler failed to start: {e}"));
            None
        }
    }
}

/// Say the probes are armed: the log line (tests and scripts wait for it, with -v), a note
/// if the driver is not loaded yet, and the start line on a terminal.
fn announce_armed(pid: u32, command: &str, attach_ms: f64, kernel: &Kernel, notes: &mut Vec<String>) -> progress::Progress {
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
fn start_line(pid: u32, command: &str, kernel: &Kernel) -> String {
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

/// Stop NVML sampling and collect the samples for `pids`; failures go to `notes`.
async fn finish_sampler(sampler: Sampler, pids: Vec<u32>, notes: &mut Vec<String>) -> Option<GpuSamples> {
    match tokio::task::spawn_blocking(move || sampler.finish(pids)).await {
        Ok(Ok(finished)) => Some(finished),
        Ok(Err(why)) => {
            notes.push(why);
            None
        }
        Err(e) => {
            notes.push(format!("the NVML sampler failed: {e}"));
            None
        }
    }
}

/// `python`: told of each device allocation as it comes, to read its Python line.
fn drain(ring: &mut RingReader, kernel: &mut Kernel, evidence: &mut Evidence, host: &mut ProcMaps, mut tape: Option<&mut Tape>, python: Option<&PythonSampler>) {
    ring.drain(|bytes, decoded| {
        let event = match decoded {
            Ok(event) => event,
            Err(e) => {
                log::debug!("undecodable record: {e}");
                evidence.decode_errors += 1;
                if let Some(t) = tape.as_deref_mut() {
                    t.recorder.event(bytes);
                }
                return;
            }
        };
        let pid = event.header().tgid;
        // Enrichment: who owns the process, read while it is still alive.
        evidence.uids.entry(pid).or_insert_with(|| process::uid(pid));
        match tape.as_deref_mut() {
            Some(t) => {
                // The host-memory answers are recorded before their event, so a replay has
                // them at hand when it folds the event in.
                let mut answers = Answering { inner: host, answers: Vec::new() };
                evidence.apply(&event, &mut answers);
                for a in answers.answers {
                    t.recorder.host_answer(a);
                }
                t.recorder.event(bytes);
            }
            None => evidence.apply(&event, host),
        }
        match event {
            Event::Call(c) => {
                if let (Some(py), Some(spec)) = (python, spec_of(c.header.probe).filter(|s| s.family == Family::Alloc)) {
                    let bytes = spec.size_arg.map_or(0, |i| c.args[usize::from(i)]);
                    py.allocated(c.header.tgid, c.header.tid, bytes, c.ret != 0);
                }
            }
            Event::TaskExit(e) => {
                // The thread is gone: fold its counters in and free its map slot.
                if let Some(c) = kernel.take_thread(e.header.tid) {
                    evidence.add_counters(e.header.tid, &c);
                    if let Some(t) = tape.as_deref_mut() {
                        t.recorder.thread_exit(e.header.tid, &c);
                    }
                }
                if e.header.tid == e.header.tgid {
                    kernel.untrace_process(e.header.tgid);
                }
            }
            Event::TaskExec(e) => {
                // The new image has not loaded its libraries yet: probe the driver it would
                // load now (its first CUDA calls are seen), then anything already mapped.
                attach_predicted(kernel, e.header.tgid);
                attach_mapped(kernel, e.header.tgid);
            }
            _ => {}
        }
    });
}

/// The live host-memory lookup, noting each answer for the recording.
struct Answering<'a> {
    inner: &'a mut ProcMaps,
    answers: Vec<HostAnswer>,
}

impl HostMemory for Answering<'_> {
    fn classify(&mut self, pid: u32, addr: u64, at_ns: u64) -> HostClass {
        let class = self.inner.classify(pid, addr, at_ns);
        self.answers.push(HostAnswer { pid, class: crate::record::replay::class_number(class), addr, at_ns });
        class
    }
}

/// Probe any CUDA driver library a traced process maps that is not probed yet. The process
/// is running traced, so a library newly probed here was mapped unprobed for a while (up to
/// one rescan, or since its exec): calls made then were missed, and the report says so.
fn attach_mapped(kernel: &mut Kernel, pid: u32) {
    for lib in libraries::mapped_by(pid) {
        let late = match kernel.attach_library(&lib) {
            Ok(true) => {
                log::warn!("process {pid} mapped {} (inode {}) before it was probed; its calls until now were not seen", lib.name, lib.inode);
                true
            }
            Ok(false) => false,
            Err(e) => {
                log::warn!("{e}");
                false
            }
        };
        kernel.note_mapping(&lib, pid, late);
    }
}

/// Probe the driver libraries `pid`'s environment would make it load (not mapped yet, so
/// nothing was missed; a failure is only logged: the rescan will find what it maps).
fn attach_predicted(kernel: &mut Kernel, pid: u32) {
    for lib in libraries::predicted_for_process(pid) {
        if let Err(e) = kernel.attach_library(&lib) {
            log::info!("predicted library {} of process {pid}: {e}", lib.name);
        }
    }
}

fn rescan_libraries(kernel: &mut Kernel) {
    for pid in kernel.traced_processes() {
        attach_mapped(kernel, pid);
    }
}

/// Drop processes that are gone without an exit event (tracepoints unavailable).
fn reap_gone(kernel: &mut Kernel) {
    for pid in kernel.traced_processes() {
        if process::stat(pid).is_none_or(|s| s.state == 'Z' || s.state == 'X') {
            kernel.untrace_process(pid);
        }
    }
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
