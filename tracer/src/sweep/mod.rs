//! `gputrace sweep`: every process on the host that holds or uses a GPU, judged.
//!
//! Stages, each in its own file: `scan` (the `/proc` census) → `probes` in host-wide mode
//! (every process's CUDA calls, on every distinct libcuda inode mapped on the host and the
//! one the loader would pick for a new process) → `activity` (counters and records folded
//! per process) → `nvml` (memory per process, per-process utilization) → `build` (rows,
//! states, `classify`, `privacy`) → `model` / `text`. Nothing here kills or signals anything.
//!
//! Why a host-wide flag in the eBPF programs rather than seeding `TRACED` with the holders
//! found by the scan: a process that starts, or first loads CUDA, during the window is
//! counted too, and the scan's answer can be stale by the time the probes are armed.

mod activity;
mod build;
mod classify;
pub mod model;
mod nvml;
mod privacy;
mod scan;
pub mod text;
mod users;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tokio::signal::unix::{signal, SignalKind};

use crate::{
    clock,
    collect::ring::RingReader,
    decode::Event,
    discover::libraries,
    error::{Result, TraceError},
    probes::{ProbeSet, Scope},
    model::Tool,
};
use build::Candidate;
use model::SweepReport;
use scan::{Details, ScanCost};

/// How often the kernel's per-thread counters are read: the resolution of
/// `last_activity_s` for launch-only work (other calls are timed exactly).
const POLL: Duration = Duration::from_millis(200);

/// A validated `sweep` command line.
#[derive(Clone, Debug)]
pub struct Options {
    pub duration: Duration,
    /// Show other users' command lines without being root.
    pub show_commands: bool,
}

/// A finished sweep: the report, and the probes still attached until `detach`.
#[derive(Debug)]
pub struct Finished {
    pub report: SweepReport,
    probes: Option<ProbeSet>,
}

impl Finished {
    /// Remove the probes, after the report is out (removal waits for the kernel, see
    /// `outcome::Outcome::detach`).
    pub fn detach(&mut self) {
        if let Some(kernel) = self.probes.take() {
            kernel.detach();
        }
    }
}

/// Probes and their reader, where they could be loaded.
struct Probes {
    kernel: ProbeSet,
    ring: RingReader,
}

pub async fn sweep(options: &Options) -> Result<Finished> {
    let began = Instant::now();
    let me = std::process::id();
    let mut notes = Vec::new();
    let mut cost = ScanCost::default();
    let mut scans = 0;

    // The census before arming: which libcuda inodes to probe, and who holds what now
    // (a holder that exits during the window is still reported, as exited).
    let start = scan::census(me, false, true);
    cost.add(&start.cost);
    scans += 1;
    let mut seen: BTreeMap<u32, Details> = start.holders.keys().filter_map(|&p| Some((p, scan::details(p)?))).collect();

    let mut probes = arm(&start.libraries, &mut notes);
    let attach_ms = began.elapsed().as_secs_f64() * 1e3;
    let start_ns = clock::monotonic_ns();
    let since_unix_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
    // Tests and scripts wait for this line (with -v) before starting work to be counted.
    log::info!(
        "armed: sweeping {} processes, probes in {} libraries after {attach_ms:.0} ms",
        start.cost.processes,
        probes.as_ref().map_or(0, |p| p.kernel.attached_libraries().len())
    );

    let mut activity = activity::Activity::default();
    let stopped_by = watch(options.duration, probes.as_mut(), &mut activity, &mut seen).await?;
    let end_ns = clock::monotonic_ns();
    drain(probes.as_mut(), &mut activity);
    observe(probes.as_ref(), &mut activity, &mut seen);

    let gpu = match tokio::task::spawn_blocking(move || nvml::query(since_unix_us)).await {
        Ok(Ok(view)) => Some(view),
        Ok(Err(why)) => {
            let why = format!("{why}; GPU memory per process is unknown (gpu: null)");
            log::warn!("{why}");
            notes.push(why);
            None
        }
        Err(e) => {
            notes.push(format!("the NVML query failed: {e}"));
            None
        }
    };

    // The census after the window: who holds what now, file tables included.
    let end = scan::census(me, true, false);
    cost.add(&end.cost);
    scans += 1;
    let candidates = candidates(me, &start, &end, &activity, gpu.as_ref(), seen);
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
    let inputs = build::Inputs {
        start_ns,
        end_ns,
        probes: probes.is_some(),
        activity: &activity,
        gpu: gpu.as_ref(),
        users: &users,
        viewer,
        show_commands: options.show_commands,
        boot: scan::boot_clock(),
    };
    let processes = build::processes(&inputs, &candidates);
    let diagnoses = build::diagnoses(&inputs, &processes);
    let kernel = probes.map(|p| p.kernel);
    let mut tracer = tracer(kernel.as_ref(), &activity, cost, scans, attach_ms, notes);
    tracer.processes_hidden = hidden.is_some();
    tracer.complete &= hidden.is_none();
    let report = SweepReport {
        schema: model::SCHEMA.to_owned(),
        tool: Tool { name: "gputrace".into(), version: env!("CARGO_PKG_VERSION").into() },
        window: model::Window {
            duration_s: end_ns.saturating_sub(start_ns) as f64 / 1e9,
            stopped_by: stopped_by.to_owned(),
            cuda_probes: kernel.is_some(),
        },
        processes,
        diagnoses,
        gpu: gpu.as_ref().map(build::gpu),
        tracer,
    };
    Ok(Finished { report, probes: kernel })
}

/// Collect during the window, until its end or a signal; returns what stopped it.
async fn watch(
    duration: Duration,
    mut probes: Option<&mut Probes>,
    activity: &mut activity::Activity,
    seen: &mut BTreeMap<u32, Details>,
) -> Result<&'static str> {
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| TraceError::io("installing", "SIGINT handler", e))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| TraceError::io("installing", "SIGTERM handler", e))?;
    let deadline = tokio::time::sleep(duration);
    tokio::pin!(deadline);
    let mut poll = tokio::time::interval(POLL);
    Ok(loop {
        tokio::select! {
            r = readable(probes.as_deref_mut()) => {
                r.map_err(|e| TraceError::io("reading", "the ring buffer", e))?;
                drain(probes.as_deref_mut(), activity);
            }
            () = &mut deadline => break "duration",
            _ = sigint.recv() => break "signal",
            _ = sigterm.recv() => break "signal",
            _ = poll.tick() => {
                drain(probes.as_deref_mut(), activity);
                observe(probes.as_deref(), activity, seen);
            }
        }
    })
}

/// Every process to judge: holders before and after the window, processes that called CUDA
/// and processes NVML lists; each with its details read now, or when first seen if gone.
fn candidates(
    me: u32,
    start: &scan::Census,
    end: &scan::Census,
    activity: &activity::Activity,
    gpu: Option<&nvml::GpuView>,
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
fn arm(mapped: &[libraries::Library], notes: &mut Vec<String>) -> Option<Probes> {
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
            let note = format!("{} is not probed, its processes' calls are not counted: {e}", lib.name);
            log::warn!("{note}");
            notes.push(note);
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

/// Wait for records; never resolves without probes.
async fn readable(probes: Option<&mut Probes>) -> std::io::Result<()> {
    match probes {
        Some(p) => p.ring.readable().await,
        None => std::future::pending().await,
    }
}

fn drain(probes: Option<&mut Probes>, activity: &mut activity::Activity) {
    let Some(p) = probes else { return };
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

/// Read the counters; remember who a newly seen process is while it is alive.
fn observe(probes: Option<&Probes>, activity: &mut activity::Activity, seen: &mut BTreeMap<u32, Details>) {
    let Some(p) = probes else { return };
    activity.observe(clock::monotonic_ns(), &p.kernel.thread_counters());
    for pid in activity.calls.keys() {
        if !seen.contains_key(pid) {
            if let Some(d) = scan::details(*pid) {
                seen.insert(*pid, d);
            }
        }
    }
}

/// gputrace's own cost and completeness.
fn tracer(
    kernel: Option<&ProbeSet>,
    activity: &activity::Activity,
    cost: ScanCost,
    scans: u32,
    attach_ms: f64,
    notes: Vec<String>,
) -> model::Tracer {
    use gputrace_common::loss;
    let losses = kernel.map(ProbeSet::losses).unwrap_or_default();
    // A return without its entry is a call already running when the probes were armed; the
    // ring-full drops of call records are already among the ring-full drops.
    let not_losses = [loss::UNMATCHED_RETURN as usize, loss::RING_FULL_CALLS as usize];
    let lost_events = losses.iter().enumerate().filter(|(i, _)| !not_losses.contains(i)).map(|(_, n)| n).sum::<u64>()
        + activity.decode_errors;
    let u = crate::usage::now().unwrap_or_default();
    let usage = (u.user_s, u.system_s, u.peak_rss_bytes);
    model::Tracer {
        cpu_s: usage.0 + usage.1,
        user_cpu_s: usage.0,
        system_cpu_s: usage.1,
        max_rss_bytes: usage.2,
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

/// The window when `--duration` is not given: long enough to see a training step or two,
/// short enough to run on a busy host without thinking about it.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);
