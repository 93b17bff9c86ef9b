//! A tracing session: pick the target, load and attach the probes, follow the process tree,
//! collect until a stop condition, and hand the evidence to the report. This is the only
//! place that sequences the stages; each stage lives in its own module.

mod target;

use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};

use crate::{
    clock,
    collect::{host_memory::ProcMaps, ring::RingReader},
    decode::Event,
    discover::{libraries, process},
    error::{Result, TraceError},
    evidence::Evidence,
    gpu::nvml::{Finished as GpuSamples, Sampler},
    probes::Kernel,
};

use target::{forward_sigterm, wait_child};
pub use target::{gate_then_exec, Target, GATE_ARG};

/// How often the traced processes' memory maps are rescanned for CUDA libraries loaded
/// after attach (dlopen) and for processes that exited unseen.
const RESCAN_EVERY: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    Duration,
    Signal,
    TargetExited,
}

/// Everything a report needs from a finished session.
#[derive(Debug)]
pub struct Outcome {
    pub evidence: Evidence,
    pub target_pid: u32,
    pub command: String,
    pub exit_status: Option<i32>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stopped_by: StopReason,
    pub libraries: Vec<crate::probes::AttachedLibrary>,
    pub losses: [u64; gputrace_common::loss::COUNT as usize],
    pub attach_ms: f64,
    pub notes: Vec<String>,
    pub maps_reads: u64,
    /// Whether scheduler and block evidence were collected.
    pub sched_traced: bool,
    pub io_traced: bool,
    /// The probes, still attached: detached by `detach` once the report is out.
    pub probes: Option<Kernel>,
    /// NVML samples, and the sampling interval; None where NVML is unavailable.
    pub gpu: Option<(GpuSamples, Duration)>,
}

/// Trace `target` until `duration`, a signal, or the end of the traced process tree.
pub async fn trace(target: Target, duration: Option<Duration>, nvml_interval: Duration) -> Result<Outcome> {
    let began = Instant::now();
    let mut notes = Vec::new();
    // NVML first, so that its samples cover the whole window.
    let sampler = start_sampler(nvml_interval, &mut notes).await;
    let (mut kernel, ring) = Kernel::load()?;
    notes.extend(kernel.notes.iter().cloned());
    let mut ring = RingReader::new(ring).map_err(|e| TraceError::io("watching the ring buffer", "EVENTS", e))?;
    let started = target.start(&mut kernel)?;
    let mut child = started.child;
    let mut exit_status = None;
    let attach_ms = began.elapsed().as_secs_f64() * 1e3;
    let start_ns = clock::monotonic_ns();
    let pid = started.pid;
    let cgroups_before = crate::discover::cgroup::snapshot(&kernel.traced_processes());
    // Tests and scripts wait for this line (with -v) before starting the traced work.
    log::info!("armed: tracing pid {pid} with probes in {} libraries after {attach_ms:.0} ms", kernel.attached_libraries().len());

    if kernel.attached_libraries().is_empty() {
        let note = format!("process {pid} has not loaded the CUDA driver (libcuda) yet; waiting for it to be loaded");
        log::warn!("{note}");
        notes.push(note);
    }

    let mut evidence = Evidence::default();
    let mut host = ProcMaps::default();
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| TraceError::io("installing", "SIGINT handler", e))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| TraceError::io("installing", "SIGTERM handler", e))?;
    let deadline = tokio::time::sleep(duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut rescan = tokio::time::interval(RESCAN_EVERY);

    let stopped_by = loop {
        tokio::select! {
            r = ring.readable() => {
                r.map_err(|e| TraceError::io("reading", "the ring buffer", e))?;
                drain(&mut ring, &mut kernel, &mut evidence, &mut host);
            }
            () = &mut deadline => break StopReason::Duration,
            _ = sigint.recv() => break StopReason::Signal,
            _ = sigterm.recv() => {
                forward_sigterm(child.as_ref());
                break StopReason::Signal;
            }
            status = wait_child(&mut child) => {
                exit_status = status;
                drain(&mut ring, &mut kernel, &mut evidence, &mut host);
                reap_gone(&mut kernel);
                if kernel.traced_processes().is_empty() { break StopReason::TargetExited; }
            }
            _ = rescan.tick() => {
                drain(&mut ring, &mut kernel, &mut evidence, &mut host);
                rescan_libraries(&mut kernel);
                reap_gone(&mut kernel);
                if kernel.traced_processes().is_empty() { break StopReason::TargetExited; }
            }
        }
    };
    let end_ns = clock::monotonic_ns();
    if exit_status.is_none() && stopped_by == StopReason::TargetExited {
        // The tree is gone; reap the command we started for its exit code.
        exit_status = tokio::time::timeout(Duration::from_secs(1), wait_child(&mut child)).await.ok().flatten();
    }
    drain(&mut ring, &mut kernel, &mut evidence, &mut host);
    collect_final_state(&kernel, &mut evidence, &cgroups_before, pid, end_ns);
    let gpu = match sampler {
        Some(sampler) => {
            let mut pids: Vec<u32> = evidence.processes.keys().copied().collect();
            pids.push(pid);
            finish_sampler(sampler, pids, &mut notes).await.map(|finished| (finished, nvml_interval))
        }
        None => None,
    };
    let (sched_traced, io_traced) = (kernel.sched_traced, kernel.io_traced);
    Ok(Outcome {
        sched_traced,
        io_traced,
        gpu,
        evidence,
        target_pid: pid,
        command: started.command,
        exit_status,
        start_ns,
        end_ns,
        stopped_by,
        libraries: kernel.attached_libraries(),
        losses: kernel.losses(),
        probes: Some(kernel),
        attach_ms,
        notes,
        maps_reads: host.reads,
    })
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

/// What the maps hold at the end: live threads' scheduler accounting (their open state closed
/// at `end_ns`) and launch counters, who took the CPU, and the cgroups' throttling since start.
fn collect_final_state(
    kernel: &Kernel,
    evidence: &mut Evidence,
    cgroups_before: &std::collections::BTreeMap<String, crate::discover::cgroup::CpuStat>,
    root: u32,
    end_ns: u64,
) {
    let cgroups_after = crate::discover::cgroup::snapshot(&kernel.traced_processes().into_iter().chain([root]).collect::<Vec<_>>());
    evidence.cgroups =
        cgroups_after.iter().filter_map(|(path, after)| Some((path.clone(), after.since(cgroups_before.get(path)?)))).collect();
    evidence.preempted_by = kernel
        .preempted_by()
        .into_iter()
        .map(|(tid, n)| {
            let stat = process::stat(tid);
            (tid, n, stat.as_ref().map(|s| tgid_of(tid).unwrap_or(s.pid)), stat.map(|s| s.comm).unwrap_or_default())
        })
        .collect();
    for (tid, sched) in kernel.sched_stats() {
        evidence.sched.entry(tid).or_default().add(&sched, end_ns);
    }
    // The kernel only creates entries for threads of traced processes: all of them count.
    for (tid, counters) in kernel.thread_counters() {
        evidence.add_counters(tid, &counters);
    }
}

/// The process a thread id belongs to (`Tgid:` in `/proc/TID/status`; thread ids are
/// reachable under `/proc` even though they are not listed).
fn tgid_of(tid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Tgid:")?.trim().parse().ok())
}

fn drain(ring: &mut RingReader, kernel: &mut Kernel, evidence: &mut Evidence, host: &mut ProcMaps) {
    ring.drain(|decoded| match decoded {
        Ok(event) => {
            let pid = event.header().tgid;
            // Enrichment: who owns the process, read while it is still alive.
            evidence.uids.entry(pid).or_insert_with(|| process::uid(pid));
            evidence.apply(&event, host);
            match event {
                Event::TaskExit(e) => {
                    // The thread is gone: fold its counters in and free its map slot.
                    if let Some(c) = kernel.take_thread(e.header.tid) {
                        evidence.add_counters(e.header.tid, &c);
                    }
                    if e.header.tid == e.header.tgid {
                        kernel.untrace_process(e.header.tgid);
                    }
                }
                Event::TaskExec(e) => attach_mapped(kernel, e.header.tgid),
                _ => {}
            }
        }
        Err(e) => {
            log::debug!("undecodable record: {e}");
            evidence.decode_errors += 1;
        }
    });
}

/// Probe any CUDA driver library a traced process maps that is not probed yet.
fn attach_mapped(kernel: &mut Kernel, pid: u32) {
    for lib in libraries::mapped_by(pid) {
        match kernel.attach_library(&lib) {
            Ok(true) => log::info!("process {pid} loaded {}; probes attached", lib.name),
            Ok(false) => {}
            Err(e) => log::warn!("{e}"),
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
    /// Remove the probes, after the report is out: each uprobe's removal waits for an RCU
    /// grace period in the kernel and the removals are serialised there, so ~120 probes on the
    /// real libcuda took ~12 s on 6.18 (docs/validation.md). Printing first means the user
    /// never waits for the report. (Detaching from a forked child instead let consecutive
    /// sessions contend in the kernel and hung a run on the GPU machine; not done.)
    pub fn detach(&mut self) {
        if let Some(kernel) = self.probes.take() {
            kernel.detach();
        }
    }
}
