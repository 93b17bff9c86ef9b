//! The sweep engine: probes armed once, then windows one after another, each judged on its
//! own (`gputrace sweep` runs one; `gputrace serve` runs them until stopped).
//!
//! Between windows nothing is re-attached: the kernel's per-thread counters keep counting,
//! and each window counts from the counters at its start (`activity::since`). A window's end
//! census is the next one's start, so a window costs one `/proc` pass; libraries of the CUDA
//! driver that appear in it (a job started with another libcuda) are probed from then on.
//! Threads that exited are taken out of the kernel's map at each window's end, so that a
//! server running for weeks keeps the map to the threads alive.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use gputrace_common::ThreadCounters;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::{activity, assemble, holders, model, scan, users, watch::JobWatch, POLL};
use crate::{
    clock,
    collect::ring::RingReader,
    decode::Event,
    discover::libraries,
    error::{Result, TraceError},
    gpu::{sampler::Sampler, summary},
    model::Tool,
    probes::{ProbeSet, Scope},
};
use assemble::Candidate;
use model::SweepReport;
use scan::{Details, ScanCost};

/// How often the engine samples NVML for device utilization and GPM SM activity: four times
/// a window, so that a window of a second (`top`) holds readings of its own (once a second,
/// `top`'s frames on the H200 showed no utilization at all: d29), and at most once a second,
/// which keeps the sampler thread's cost negligible on a host of 8 GPUs.
fn nvml_sampling(window: Duration) -> Duration {
    (window / 4).clamp(Duration::from_millis(250), Duration::from_secs(1))
}

/// SIGINT and SIGTERM, installed once for every window.
#[derive(Debug)]
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    /// Catch SIGINT and SIGTERM for the rest of the process: they then end the window being
    /// watched rather than kill gputrace.
    pub fn install() -> Result<Self> {
        let int = signal(SignalKind::interrupt()).map_err(|e| TraceError::io("installing", "SIGINT handler", e))?;
        let term = signal(SignalKind::terminate()).map_err(|e| TraceError::io("installing", "SIGTERM handler", e))?;
        Ok(Self { int, term })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// Probes and their reader, where they could be loaded.
#[derive(Debug)]
struct Probes {
    kernel: ProbeSet,
    ring: RingReader,
}

/// What a window ended by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The window ran its full length.
    Duration,
    /// SIGINT or SIGTERM came first.
    Signal,
}

impl Stopped {
    fn as_str(self) -> &'static str {
        match self {
            Self::Duration => "duration",
            Self::Signal => "signal",
        }
    }
}

/// The probes, the NVML sampler and the state carried from one window to the next:
/// `sweep` runs one window on it, `serve` and `top` run windows until stopped.
#[derive(Debug)]
pub struct Engine {
    me: u32,
    show_commands: bool,
    probes: Option<Probes>,
    /// Notes of the arming, repeated in every window's report.
    arm_notes: Vec<String>,
    attach_ms: f64,
    /// The census the next window starts from, and its cost.
    start: scan::Census,
    /// Device utilization and SM activity; None without NVML.
    sampler: Option<Sampler>,
    /// Samples of the previous window, for the driver's samples that straddle its end.
    samples: Vec<summary::Sample>,
    /// The kernel's counters when the next window starts, by thread.
    baseline: BTreeMap<u32, ThreadCounters>,
    /// The kernel's loss counters then (a window reports its own).
    losses_before: u64,
    /// Windows judged so far.
    pub windows: u64,
    /// Windows follow one another: each end census looks for new driver libraries to probe.
    continuous: bool,
    /// Warnings of a window go to the debug log (a full-screen view owns the terminal).
    quiet: bool,
    /// The active jobs' threads, for their judgements.
    jobs: JobWatch,
    /// Whether NVML answered at the last window's end; None before the first.
    nvml_answered: Option<bool>,
    /// The GPUs NVML could not reach then.
    unreachable: Vec<String>,
    /// The window's NVML query, one at a time (a hung driver keeps the last one).
    nvml_flight: holders::Flight,
    /// Libraries refused for a lasting reason, by (dev, inode), with the note that says why:
    /// tried once, not at every window, and said in every window's notes.
    refused: BTreeMap<(u64, u64), String>,
}

impl Engine {
    /// The first census, then the probes on every libcuda it found and on the one the loader
    /// would give a new process. Without BPF the sweep goes on from `/proc` and NVML.
    /// `window`: how long the windows will be.
    #[must_use]
    pub fn arm(show_commands: bool, continuous: bool, window: Duration) -> Self {
        let began = Instant::now();
        let me = std::process::id();
        let start = scan::census(me, false, true);
        let mut arm_notes = Vec::new();
        let mut refused = BTreeMap::new();
        let probes = arm(&start.libraries, &mut arm_notes, &mut refused);
        let attach_ms = began.elapsed().as_secs_f64() * 1e3;
        // Tests and scripts wait for this line (with -v) before starting work to be counted.
        log::info!(
            "armed: sweeping {} processes, probes in {} libraries after {attach_ms:.0} ms",
            start.cost.processes,
            probes.as_ref().map_or(0, |p| p.kernel.attached_libraries().len())
        );
        let sampler = Sampler::start(nvml_sampling(window)).map_err(|why| log::debug!("no NVML sampling: {why}")).ok();
        let mut jobs = JobWatch::default();
        if probes.is_some() {
            jobs.begin(start.holders.keys().copied().filter(|&p| p != me));
        }
        // The probes were just loaded: the first window counts from zero, so that calls made
        // once the "armed" line is out are all its own.
        Self {
            me,
            show_commands,
            probes,
            arm_notes,
            attach_ms,
            start,
            sampler,
            samples: Vec::new(),
            baseline: BTreeMap::new(),
            losses_before: 0,
            windows: 0,
            continuous,
            quiet: false,
            jobs,
            nvml_answered: None,
            unreachable: Vec::new(),
            nvml_flight: holders::Flight::default(),
            refused,
        }
    }

    /// Log what a window finds wrong at debug level only: the caller shows it.
    pub fn quiet(&mut self) {
        self.quiet = true;
    }

    /// Whether CUDA calls are counted.
    #[must_use]
    pub fn probing(&self) -> bool {
        self.probes.is_some()
    }

    /// Judge one window of `duration`, or until a signal.
    pub async fn window(&mut self, duration: Duration, signals: &mut Signals) -> Result<(SweepReport, Stopped)> {
        let start_ns = clock::monotonic_ns();
        let since_unix_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        let mut notes = self.arm_notes.clone();
        let mut cost = std::mem::take(&mut self.start.cost);
        let mut seen: BTreeMap<u32, Details> = self.start.holders.keys().filter_map(|&p| Some((p, scan::details(p)?))).collect();
        let mut activity = activity::CudaActivity::default();
        let stopped = self.watch(duration, &mut activity, &mut seen, signals).await;
        let end_ns = clock::monotonic_ns();
        self.drain(&mut activity);
        self.observe(&mut activity, &mut seen);

        let flight = self.nvml_flight.clone();
        let gpu = match tokio::task::spawn_blocking(move || holders::query(&flight, since_unix_us)).await {
            Ok(Ok(view)) => {
                if self.nvml_answered == Some(false) && !self.quiet {
                    log::info!("NVML answers again");
                }
                self.nvml_answered = Some(true);
                self.unreachable_gpus(&view.unreachable, &mut notes);
                Some(view)
            }
            Ok(Err(why)) => {
                let why = format!("{why}; GPU memory per process is unknown (gpu: null)");
                // Said when it starts: at the first window, or when NVML stops answering (a
                // GPU lost from the bus), not at every window of `serve` and `top` (whose
                // screen says it in its own way).
                if self.nvml_answered != Some(false) && !self.quiet {
                    log::warn!("{why}");
                } else {
                    log::debug!("{why}");
                }
                self.nvml_answered = Some(false);
                notes.push(why);
                None
            }
            Err(e) => {
                notes.push(format!("the NVML query failed: {e}"));
                None
            }
        };
        let devices = self.device_activity(start_ns, end_ns);

        // The census after the window: who holds what now, file tables included; the next
        // window starts from it.
        let end = scan::census(self.me, true, self.continuous);
        cost.add(&end.cost);
        if self.continuous {
            self.probe_new_libraries(&end.libraries, &mut notes);
        }
        refused_notes(&self.refused, &mut notes);
        let candidates = candidates(self.me, &self.start, &end, &activity, gpu.as_ref(), seen);
        let viewer = rustix::process::geteuid().as_raw();
        // A plain user under `hidepid` sees only their own processes: an empty census then says
        // nothing about the host.
        let hidden = if viewer == 0 { None } else { crate::discover::procfs::hiding_option() };
        if let Some(option) = &hidden {
            notes.push(format!(
                "/proc is mounted with {option}: other users' processes are invisible to you, so GPU holders among them cannot be \
                 seen; run the sweep as root to see the whole host"
            ));
        }
        if cost.unreadable > 0 {
            let why = if viewer == 0 { "the kernel refused to let us read them" } else { "another user's /proc entries need root" };
            notes.push(format!(
                "{} times a process's memory map or file table could not be read ({why}): GPU holders among them may be missed",
                cost.unreadable
            ));
        }

        let users = users::resolve(candidates.iter().filter_map(|c| c.details.as_ref()?.uid));
        let inputs = assemble::Inputs {
            start_ns,
            end_ns,
            probes: self.probes.is_some(),
            activity: &activity,
            gpu: gpu.as_ref(),
            users: &users,
            viewer,
            show_commands: self.show_commands,
            boot: scan::boot_clock(),
        };
        let mut processes = assemble::processes(&inputs, &candidates);
        let diagnoses = assemble::diagnoses(&inputs, &processes);
        let gpu = gpu.as_ref().map(|g| assemble::gpu(g, &devices));
        if self.probes.is_some() {
            self.jobs.judge(end_ns.saturating_sub(start_ns), &activity, &mut processes, gpu.as_ref().map_or(&[], |g| &g.devices));
        }
        let lost = self.end_window();
        let scans = if self.windows == 0 { 2 } else { 1 };
        let mut tracer = tracer(self.probes.as_ref().map(|p| &p.kernel), &activity, lost, cost, scans, self.attach_ms, notes);
        tracer.processes_hidden = hidden.is_some();
        tracer.complete &= hidden.is_none();
        self.start = scan::Census { cost: ScanCost::default(), ..end };
        self.windows += 1;
        let report = SweepReport {
            schema: model::SCHEMA.to_owned(),
            tool: Tool { name: "gputrace".into(), version: env!("CARGO_PKG_VERSION").into() },
            window: model::Window {
                duration_s: end_ns.saturating_sub(start_ns) as f64 / 1e9,
                stopped_by: stopped.as_str().to_owned(),
                cuda_probes: self.probes.is_some(),
            },
            processes,
            diagnoses,
            gpu,
            tracer,
        };
        Ok((report, stopped))
    }

    /// Say which GPUs NVML cannot reach, in the window's notes, and in the log when that
    /// changes (a GPU lost from the bus mid-run, or back).
    fn unreachable_gpus(&mut self, now: &[String], notes: &mut Vec<String>) {
        if now != self.unreachable.as_slice() && !self.quiet {
            if now.is_empty() {
                log::info!("NVML reaches every GPU again");
            } else {
                log::warn!("NVML cannot reach {}; memory, utilization and processes there are unknown", now.join(", "));
            }
        }
        for gpu in now {
            notes.push(format!("NVML cannot reach {gpu}: its memory, utilization and processes are unknown"));
        }
        self.unreachable = now.to_vec();
    }

    /// The probes, for the caller to detach once its output is out.
    #[must_use]
    pub fn into_probes(self) -> Option<ProbeSet> {
        if let Some(s) = self.sampler {
            let _ = s.finish(Vec::new());
        }
        self.probes.map(|p| p.kernel)
    }

    /// Collect during the window, until its end or a signal.
    async fn watch(&mut self, duration: Duration, activity: &mut activity::CudaActivity, seen: &mut BTreeMap<u32, Details>, signals: &mut Signals) -> Stopped {
        let deadline = tokio::time::sleep(duration);
        tokio::pin!(deadline);
        let mut poll = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                r = readable(self.probes.as_mut()) => {
                    if let Err(e) = r {
                        log::warn!("reading the ring buffer: {e}");
                    }
                    self.drain(activity);
                }
                () = &mut deadline => return Stopped::Duration,
                () = signals.recv() => return Stopped::Signal,
                _ = poll.tick() => {
                    self.drain(activity);
                    self.observe(activity, seen);
                }
            }
        }
    }

    fn drain(&mut self, activity: &mut activity::CudaActivity) {
        let Some(p) = self.probes.as_mut() else { return };
        p.ring.drain(|_, decoded| match decoded {
            Ok(Event::Call(call)) => activity.apply(&call),
            // No tracepoints in a sweep: other kinds are not expected, and carry nothing needed.
            Ok(_) => {}
            Err(e) => {
                log::debug!("undecodable record: {e}");
                activity.decode_errors += 1;
            }
        });
    }

    /// Read the counters (the window's part of them); remember who a newly seen process is
    /// while it is alive.
    fn observe(&mut self, activity: &mut activity::CudaActivity, seen: &mut BTreeMap<u32, Details>) {
        let Some(p) = self.probes.as_ref() else { return };
        let counters = p.kernel.thread_counters();
        activity.observe(clock::monotonic_ns(), &activity::since(&counters, &self.baseline));
        self.jobs.poll(activity, &counters, p.kernel.call_epoch().load(std::sync::atomic::Ordering::Relaxed));
        for pid in activity.calls.keys() {
            if !seen.contains_key(pid) {
                if let Some(d) = scan::details(*pid) {
                    seen.insert(*pid, d);
                }
            }
        }
    }

    /// Each device's utilization and SM activity over the window, from the sampler.
    fn device_activity(&mut self, start_ns: u64, end_ns: u64) -> Vec<crate::model::GpuDevice> {
        let Some(nvml) = self.sampler.as_ref() else { return Vec::new() };
        let mut taken = std::mem::take(&mut self.samples);
        taken.extend(nvml.take_samples());
        let cx = summary::Context { start_ns, end_ns, ..summary::Context::default() };
        let devices = summary::summarize(&nvml.devices, &taken, &cx);
        // Keep the window's own samples only: the next window needs the last of them.
        taken.retain(|s| s.at_ns >= start_ns);
        self.samples = taken;
        devices
    }

    /// Probe the driver libraries the last census found that are not probed yet.
    fn probe_new_libraries(&mut self, found: &[libraries::Library], notes: &mut Vec<String>) {
        let Some(p) = self.probes.as_mut() else { return };
        let probed: BTreeSet<(u64, u64)> = p.kernel.attached_libraries().iter().map(|l| (l.library.dev, l.library.inode)).collect();
        let fresh: Vec<&libraries::Library> = found.iter().filter(|l| !probed.contains(&(l.dev, l.inode)) && !p.kernel.was_refused(l)).collect();
        for lib in fresh {
            match p.kernel.attach_library(lib) {
                Ok(_) => log::info!("probing {} from now on (inode {})", lib.name, lib.inode),
                Err(e) => refuse(lib, &e, notes, &mut self.refused),
            }
        }
    }

    /// The window's lost records; the counters the next window starts from, after taking the
    /// threads that exited out of the kernel's map.
    fn end_window(&mut self) -> u64 {
        let Some(p) = self.probes.as_mut() else { return 0 };
        let losses = counted_losses(&p.kernel);
        let lost = losses.saturating_sub(self.losses_before);
        self.losses_before = losses;
        let mut baseline = BTreeMap::new();
        let mut gone = 0;
        for (tid, c) in p.kernel.thread_counters() {
            if std::path::Path::new(&format!("/proc/{}/task/{tid}", c.tgid)).exists() {
                baseline.insert(tid, c);
            } else {
                p.kernel.take_thread(tid);
                gone += 1;
            }
        }
        log::debug!("counter map: {} threads alive kept, {gone} exited taken out", baseline.len());
        self.baseline = baseline;
        lost
    }
}

/// Every process to judge: holders before and after the window, processes that called CUDA
/// and processes NVML lists; each with its details read now, or when first seen if gone.
fn candidates(
    me: u32,
    start: &scan::Census,
    end: &scan::Census,
    activity: &activity::CudaActivity,
    gpu: Option<&holders::GpuView>,
    mut seen: BTreeMap<u32, Details>,
) -> Vec<Candidate> {
    let mut pids: BTreeSet<u32> = start.holders.keys().chain(end.holders.keys()).copied().collect();
    pids.extend(activity.pids());
    pids.extend(gpu.iter().flat_map(|g| g.processes.keys().copied()));
    pids.remove(&me);
    pids.into_iter()
        .map(|pid| {
            let now = scan::details(pid).filter(|d| d.state != 'X');
            let alive = now.is_some();
            let holding = end.holders.get(&pid).or_else(|| start.holders.get(&pid).filter(|_| !alive)).cloned().unwrap_or_default();
            Candidate { pid, details: now.or_else(|| seen.remove(&pid)), alive, holding }
        })
        .collect()
}

/// Load the probes host-wide and attach them to every distinct libcuda mapped on the host,
/// plus the one the dynamic loader would give a process starting now (so a job that starts
/// during the window is counted from its first call). Where the probes cannot be loaded (not
/// root, no BPF), the sweep goes on from `/proc` and NVML alone, and says so.
fn arm(mapped: &[libraries::Library], notes: &mut Vec<String>, refused: &mut BTreeMap<(u64, u64), String>) -> Option<Probes> {
    let (mut kernel, ring) = match ProbeSet::load_scoped(Scope::AllCuda) {
        Ok(k) => k,
        Err(e) => {
            let note = format!(
                "CUDA calls are not counted ({e}); states come from /proc and NVML only, and without NVML \
                 whether a holder is working is unknown"
            );
            log::warn!("{note}");
            notes.push(note);
            return None;
        }
    };
    let predicted = libraries::predicted_for_command(libraries::inherited_ld_library_path().as_deref());
    for lib in mapped.iter().chain(&predicted) {
        if let Err(e) = kernel.attach_library(lib) {
            refuse(lib, &e, notes, refused);
        }
    }
    if kernel.attached_libraries().is_empty() {
        notes.push("no process maps the CUDA driver (libcuda) and none is on the loader path: no CUDA call can be counted".to_owned());
    }
    notes.extend(kernel.notes.iter().cloned());
    match RingReader::new(ring) {
        Ok(ring) => Some(Probes { kernel, ring }),
        Err(e) => {
            notes.push(format!("CUDA calls are not counted: watching the ring buffer failed: {e}"));
            None
        }
    }
}

/// Libraries not probed that each window names one by one; the rest are counted. Any user can
/// offer files by the thousand, and the notes are there to be read.
const REFUSED_NOTES: usize = 16;

/// The notes of the libraries refused so far, at most [`REFUSED_NOTES`] and a count.
fn refused_notes(refused: &BTreeMap<(u64, u64), String>, notes: &mut Vec<String>) {
    notes.extend(refused.values().take(REFUSED_NOTES).cloned());
    if refused.len() > REFUSED_NOTES {
        notes.push(format!("{} more libraries are not probed, for the same kinds of reasons (`-v` logs each)", refused.len() - REFUSED_NOTES));
    }
}

/// Say why `lib` is not probed: in this window's notes for a failure that may pass (its file
/// went away), or for every window from now on for a lasting one, which is not tried again.
fn refuse(lib: &libraries::Library, e: &TraceError, notes: &mut Vec<String>, refused: &mut BTreeMap<(u64, u64), String>) {
    let note = format!("{} is not probed, its processes' calls are not counted: {e}", lib.name);
    // At info: `top` owns the terminal, and the notes say it in every report.
    log::info!("{note}");
    if e.lasting() {
        refused.insert((lib.dev, lib.inode), note);
    } else {
        notes.push(note);
    }
}

/// Wait for records; never resolves without probes.
async fn readable(probes: Option<&mut Probes>) -> std::io::Result<()> {
    match probes {
        Some(p) => p.ring.readable().await,
        None => std::future::pending().await,
    }
}

/// The kernel's losses that are lost records: a return without its entry is a call already
/// running when the probes were armed; the ring-full drops of call records are already among
/// the ring-full drops.
fn counted_losses(kernel: &ProbeSet) -> u64 {
    use gputrace_common::loss;
    let not_losses = [loss::UNMATCHED_RETURN as usize, loss::RING_FULL_CALLS as usize];
    kernel.losses().iter().enumerate().filter(|(i, _)| !not_losses.contains(i)).map(|(_, n)| n).sum()
}

/// gputrace's own cost and completeness over the window (`lost`: the kernel's lost records
/// in it).
fn tracer(kernel: Option<&ProbeSet>, activity: &activity::CudaActivity, lost: u64, cost: ScanCost, scans: u32, attach_ms: f64, notes: Vec<String>) -> model::Tracer {
    let lost_events = lost + activity.decode_errors;
    let u = crate::usage::now().unwrap_or_default();
    model::Tracer {
        cpu_s: u.user_s + u.system_s,
        user_cpu_s: u.user_s,
        system_cpu_s: u.system_s,
        max_rss_bytes: u.peak_rss_bytes,
        proc_scan_ms: cost.elapsed.as_secs_f64() * 1e3,
        proc_scans: scans,
        processes_scanned: cost.processes,
        processes_unreadable: cost.unreadable,
        fds_read: cost.fds_read,
        attach_ms,
        libraries: kernel
            .map(ProbeSet::attached_libraries)
            .unwrap_or_default()
            .into_iter()
            .map(|l| model::Library { path: l.library.name, inode: l.library.inode, symbols: l.symbols.len() })
            .collect(),
        probe_hits: activity.hits.values().sum(),
        lost_events,
        complete: lost_events == 0,
        processes_hidden: false,
        notes,
    }
}
