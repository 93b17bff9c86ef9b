//! Building the report model from a finished session.

use gputrace_common::{loss, Family, PROBES};

use crate::model::{
    Allocs, ContextCall, Copies, CopyClassified, CopyDir, Count, Cuda, Gpu, HostPinned, Launches, LibraryEntry, Loss, ProbeHits,
    ProcessEntry, Report, SymbolWait, Syncs, Target, ThreadEntry, Tool, Tracer, Vmm, Window, SCHEMA,
};
use crate::{
    detect,
    evidence::{DirStats, Evidence},
    outcome::Outcome,
};

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The loss counters by name.
fn loss_of(losses: &[u64; loss::COUNT as usize], undecodable: u64) -> Loss {
    Loss {
        ring_full: losses[loss::RING_FULL as usize],
        ring_full_calls: losses[loss::RING_FULL_CALLS as usize],
        thread_map_full: losses[loss::THREAD_MAP_FULL as usize],
        inflight_full: losses[loss::INFLIGHT_FULL as usize],
        unmatched_return: losses[loss::UNMATCHED_RETURN as usize],
        process_map_full: losses[loss::PROCESS_MAP_FULL as usize],
        sched_map_full: losses[loss::SCHED_MAP_FULL as usize],
        io_map_full: losses[loss::IO_MAP_FULL as usize],
        wake_map_full: losses[loss::WAKE_MAP_FULL as usize],
        sample_map_full: losses[loss::SAMPLE_MAP_FULL as usize],
        stack_copy_failed: losses[loss::STACK_COPY_FAILED as usize],
        undecodable,
    }
}

/// The analysis of the outcome (`analysis::run`, as the flight recorder's).
fn analysis_of(outcome: &Outcome, gpu: Option<&crate::model::Gpu>, traced: &[u32]) -> detect::Run {
    super::analysis::run(&super::analysis::Window {
        evidence: &outcome.evidence,
        start_ns: outcome.start_ns,
        end_ns: outcome.end_ns,
        devices: gpu.map(|g| g.devices.as_slice()),
        samples: outcome.gpu.as_ref().map(|(samples, _)| samples),
        traced,
        cpus: outcome.cpus,
        entry_only: outcome.entry_only,
        libraries: &outcome.libraries,
        trap_costs: outcome.trap_costs.as_ref(),
    })
}

/// Assemble the report for `outcome`, with the GPU view if NVML answered.
#[must_use]
pub fn build(outcome: &Outcome) -> Report {
    let ev = &outcome.evidence;
    let window_ns = outcome.end_ns.saturating_sub(outcome.start_ns);
    let traced: Vec<u32> = ev.pids().into_iter().chain([outcome.target_pid]).collect();
    let gpu = outcome.gpu.as_ref().map(|(samples, interval)| {
        let mut devices = crate::gpu::summarize(&samples.devices, &samples.samples, &crate::gpu::Context {
            holders: &samples.holders,
            traced: &traced,
            start_ns: outcome.start_ns,
            end_ns: outcome.end_ns,
        });
        for (d, info) in devices.iter_mut().zip(&samples.devices) {
            d.visible_to_target = crate::gpu::identity::sees(&outcome.cuda_env, info, &samples.devices);
        }
        Gpu {
            available: true,
            driver_version: samples.driver_version.clone(),
            sample_hz: 1.0 / interval.as_secs_f64(),
            devices,
            cuda_env: outcome.cuda_env.clone(),
        }
    });
    let cuda = cuda(ev, outcome, window_ns);
    let launches_estimated = cuda.launches.estimated;
    let loss = loss_of(&outcome.losses, ev.decode_errors());
    // A return without its entry is a call that started before we attached: not a loss.
    let lost_events = lost_events(&loss);
    let probed_late = outcome.libraries.iter().map(|l| l.probed_late_for.len() as u64).sum::<u64>();
    let detect::Run { findings, memory, framework, .. } = analysis_of(outcome, gpu.as_ref(), &traced);
    let machine = machine_notes(outcome, gpu.as_ref(), &findings.diagnoses);
    let mut processes: Vec<ProcessEntry> =
        ev.processes.iter().map(|(&pid, p)| ProcessEntry { pid, parent: p.parent, execs: p.execs, exited: p.exited }).collect();
    if !ev.processes.contains_key(&outcome.target_pid) {
        processes.insert(0, ProcessEntry { pid: outcome.target_pid, parent: None, execs: 0, exited: false });
    }
    let overhead = super::overhead::estimate(ev, window_ns, outcome.entry_only, &outcome.libraries, outcome.trap_costs.as_ref());
    // Met: the window's estimate is within the budget (the controller's own figure is for
    // the last period only).
    let sampling = outcome.sampling.clone().map(|mut s| {
        // One figure for the cost, the window's: the controller's own estimate covered its
        // last period only, and the text showed the window's beside it.
        s.estimated_overhead_pct = overhead.fraction_of_window * 100.0;
        s.met = s.achievable && s.estimated_overhead_pct <= s.max_overhead_pct * 1.001;
        s
    });
    Report {
        schema: SCHEMA.into(),
        tool: Tool { name: "gputrace".into(), version: env!("CARGO_PKG_VERSION").into() },
        started_at: crate::clock::rfc3339(outcome.started_unix_s),
        host: outcome.host.clone(),
        target: Target {
            pid: outcome.target_pid,
            command: outcome.command.clone(),
            exit_code: outcome.exit_status,
            exit_signal: outcome.exit_signal,
            processes,
            // Loaded means mapped by a traced process (a probed file on the loader's path is
            // not enough), or evident from a probe that fired.
            cuda_loaded: outcome.libraries.iter().any(|l| !l.mapped_by.is_empty()) || !ev.hits().is_empty(),
            framework,
        },
        window: window(outcome, findings.time.as_ref()),
        cpu: super::host_sections::cpu(outcome),
        cuda,
        io: outcome.io_traced.then(|| super::host_sections::io(&ev.io)),
        gpu,
        time_account: findings.time.as_ref().map(time_account),
        verdict: findings.verdict,
        diagnoses: findings.diagnoses,
        gpu_idle: findings.gpu_idle,
        steps: findings.steps,
        step_model: findings.step_model,
        memory: Some(memory),
        nccl: findings.nccl,
        tracer: Tracer {
            lost_events,
            overhead: overhead.clone(),
            entry_only: outcome.entry_only,
            // A damaged recording lost an unknown amount after the damage.
            complete: lost_events == 0
                && probed_late == 0
                // Launches counted part of the time and scaled are not a complete count.
                && !launches_estimated
                && outcome.recording.as_ref().is_none_or(|r| r.closed && r.damage.is_none() && r.frames_dropped == 0),
            probed_late,
            loss,
            probes: probe_hits(ev, outcome),
            libraries: outcome
                .libraries
                .iter()
                .map(|l| LibraryEntry { path: l.library.name.clone(), inode: l.library.inode, symbols: l.symbols.len() })
                .collect(),
            attach_ms: outcome.attach_ms,
            uprobe_links: outcome.uprobe_links,
            startup_ms: outcome.startup,
            maps_reads: outcome.maps_reads,
            notes: tracer_notes(outcome, machine, findings.time.as_ref(), sampling.as_ref()),
            recording: outcome.recording.clone(),
            sampling,
            peak_rss_bytes: outcome.peak_rss_bytes,
            cpu_s: outcome.cpu_s,
            events_delivered: ev.delivered,
            call_events_delivered: ev.calls_delivered,
            stacks: stack_counts(ev),
        },
    }
}

/// Events lost anywhere: the counts are short by them. (A full wake or sample map, or a
/// stack not copied, lose detail, not events.)
fn lost_events(loss: &Loss) -> u64 {
    // Saturating: the counters are the kernel's (or a recording's), never trusted to be small.
    [loss.ring_full, loss.thread_map_full, loss.inflight_full, loss.process_map_full, loss.sched_map_full, loss.io_map_full, loss.undecodable]
        .into_iter()
        .fold(0u64, u64::saturating_add)
}

/// `tracer.stacks`, where stacks were taken: samples or spells, or allocations with frames
/// (with `--no-stacks` allocations still come, under no stack).
fn stack_counts(ev: &crate::evidence::Evidence) -> Option<crate::model::StackCounts> {
    let taken = !ev.stacks.is_empty() || ev.alloc_stacks.iter().any(|a| !a.frames.is_empty());
    taken.then(|| crate::stacks::counts::count(&ev.stacks, &ev.alloc_stacks))
}

fn copy_dir(d: &DirStats) -> CopyDir {
    CopyDir {
        count: d.count,
        bytes: d.bytes,
        pageable: d.pageable,
        pageable_bytes: d.pageable_bytes,
        blocking_s: secs(d.call_ns),
        classified: CopyClassified {
            pinned_traced: d.pinned_traced,
            pinned_by_map: d.pinned_by_map,
            pageable: d.pageable,
            unknown: d.unknown_host,
        },
        sync_api: d.sync_api,
        then_synced: d.then_synced,
        then_synced_wait_s: secs(d.then_synced_wait_ns),
        scalar_reads: d.scalar_reads,
        scalar_read_wait_s: secs(d.scalar_read_wait_ns),
    }
}

fn cuda(ev: &Evidence, outcome: &Outcome, window_ns: u64) -> Cuda {
    // Per thread, so that launches counted while the overhead budget had the probes on part
    // of the time are scaled to the window (`ThreadStats::hits_estimated`).
    let launched = |ids: &[u32]| -> u64 { ev.threads.values().map(|t| ids.iter().map(|&id| t.hits_estimated(id as usize)).sum::<u64>()).sum() };
    let family = |f: Family| -> u64 { launched(&PROBES.iter().filter(|p| p.family == f).map(|p| p.id).collect::<Vec<_>>()) };
    let cooperative_ids: Vec<u32> =
        ["cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"].iter().filter_map(|s| PROBES.iter().find(|p| p.symbol == *s)).map(|p| p.id).collect();
    let cooperative = launched(&cooperative_ids);
    let kernels = family(Family::Launch);
    let mut threads: Vec<ThreadEntry> = ev
        .threads
        .iter()
        .map(|(&tid, t)| ThreadEntry {
            tid,
            pid: t.pid,
            kernels: t.kernel_launches(),
            graphs: t.graph_launches(),
            copies: t.copies,
            copy_s: secs(t.copy_ns),
            syncs: t.syncs,
            sync_wait_s: secs(t.sync_wait_ns),
            queue_idle_s: secs(t.queue_idle_ns),
        })
        .collect();
    threads.sort_by_key(|t| std::cmp::Reverse((t.kernels + t.graphs, t.syncs)));
    Cuda {
        launches: Launches {
            kernels,
            graphs: family(Family::GraphLaunch),
            cooperative,
            per_second: if window_ns == 0 { 0.0 } else { kernels as f64 / secs(window_ns) },
            launch_rate_per_s: if window_ns == 0 { 0.0 } else { (kernels + family(Family::GraphLaunch)) as f64 / secs(window_ns) },
            estimated: outcome.sampling.as_ref().is_some_and(|s| s.on_fraction < 1.0),
        },
        copies: Copies {
            h2d: copy_dir(&ev.copies.h2d),
            d2h: copy_dir(&ev.copies.d2h),
            d2d: copy_dir(&ev.copies.d2d),
            peer: copy_dir(&ev.copies.peer),
            h2h: copy_dir(&ev.copies.h2h),
        },
        memsets: Count { count: ev.memsets.count, bytes: ev.memsets.bytes },
        syncs: Syncs {
            count: ev.syncs.count,
            wait_s: secs(ev.syncs.wait_ns),
            by_symbol: ev
                .syncs
                .by_symbol
                .iter()
                .map(|(s, (n, w))| SymbolWait { symbol: (*s).into(), count: *n, wait_s: secs(*w) })
                .collect(),
        },
        allocs: Allocs {
            count: ev.allocs.count,
            frees: ev.allocs.frees,
            bytes: ev.allocs.bytes,
            freed_bytes: ev.allocs.freed_bytes,
            failures: ev.allocs.failures,
            out_of_memory: ev.allocs.out_of_memory,
            live_bytes: ev.allocs.live_bytes,
            peak_live_bytes: ev.allocs.peak_live_bytes,
        },
        host_pinned: HostPinned {
            count: ev.host_pins.count,
            bytes: ev.host_pins.bytes,
            frees: ev.host_pins.frees,
            failures: ev.host_pins.failures,
        },
        vmm: Vmm {
            maps: ev.vmm.maps,
            unmaps: ev.vmm.unmaps,
            mapped_bytes: ev.vmm.mapped_bytes,
            unmapped_bytes: ev.vmm.unmapped_bytes,
            failures: ev.vmm.failures,
            call_s: secs(ev.vmm.call_ns),
        },
        contexts: ev
            .contexts
            .iter()
            .map(|c| ContextCall {
                symbol: c.symbol.into(),
                pid: c.pid,
                tid: c.tid,
                uid: ev.uid_of(c.pid),
                at_s: secs(c.ts_ns.saturating_sub(outcome.start_ns)),
                duration_s: secs(c.duration_ns),
                result: c.result,
            })
            .collect(),
        queue_idle_s: secs(ev.threads.values().map(|t| t.queue_idle_ns).sum()),
        threads,
    }
}

/// The session's notes, one for each library some process ran with before it was probed,
/// and one when the waker map overflowed.
fn notes(outcome: &Outcome) -> Vec<String> {
    let mut notes = outcome.notes.clone();
    let samples_lost = outcome.losses[gputrace_common::loss::SAMPLE_MAP_FULL as usize];
    if samples_lost > 0 {
        notes.push(format!("{samples_lost} stack samples could not be counted (the sample map was full): diagnoses[].sites are partial"));
    }
    let wakes_lost = outcome.losses[gputrace_common::loss::WAKE_MAP_FULL as usize];
    if wakes_lost > 0 {
        notes.push(format!(
            "{wakes_lost} wakeups could not be counted by waker (the waker map was full): time_account.waits is partial"
        ));
    }
    for l in outcome.libraries.iter().filter(|l| !l.probed_late_for.is_empty()) {
        let pids: Vec<String> = l.probed_late_for.iter().map(u32::to_string).collect();
        notes.push(format!(
            "{} (inode {}) was mapped by process {} before gputrace probed it (a library replaced on disk, or loaded from \
             a place not on the loader's path): that process's calls until it was found, up to 200 ms, were not seen",
            l.library.name,
            l.library.inode,
            pids.join(", ")
        ));
    }
    notes
}

/// Every note of the report, in order: what could not be seen, the machine's faults that
/// bear on a diagnosis, the allocator that stayed silent, the start-up left out, a budget
/// missed.
fn tracer_notes(outcome: &Outcome, machine: Vec<String>, time: Option<&crate::evidence::time_account::TimeAccount>, sampling: Option<&crate::model::Sampling>) -> Vec<String> {
    notes(outcome)
        .into_iter()
        .chain(machine)
        .chain(silent_allocator(&outcome.evidence, outcome))
        .chain(time.and_then(|t| t.startup.as_ref()).map(startup_note))
        .chain(sampling.filter(|s| !s.met).map(budget_missed))
        .collect()
}

/// The doctor's GPU checks that bear on a diagnosis found, judged on what the session saw.
fn machine_notes(outcome: &Outcome, gpu: Option<&Gpu>, found: &[crate::model::Diagnosis]) -> Vec<String> {
    let Some(device) = gpu.and_then(|g| detect::account::job_device(&g.devices)) else { return Vec::new() };
    crate::doctor::bearing::notes(found, &crate::doctor::bearing::Seen { device, target_pid: outcome.target_pid, placement: outcome.placement.as_ref(), live: outcome.recording.is_none() })
}

/// Under `--tensors`, a caching allocator probed that never reported a block while the job
/// allocated through the driver: PyTorch's cudaMallocAsync backend does not report to the
/// profiler hook (torch 2.11 on the H200, docs/validation.md).
fn silent_allocator(ev: &Evidence, outcome: &Outcome) -> Option<String> {
    let hooked = outcome.libraries.iter().any(|l| crate::discover::libraries::is_allocator_library(l.library.file_name()) && !l.symbols.is_empty());
    (hooked && !ev.blocks.seen() && ev.allocs.count > 0).then(|| {
        "--tensors: PyTorch's caching allocator was probed but never reported a block while the job allocated through the driver (its cudaMallocAsync backend does not): memory is seen at the driver level only".to_owned()
    })
}

/// One entry per probed symbol. One program serves a symbol in every library it is attached
/// to, so hits cannot be split by library; `library` names them all.
fn probe_hits(ev: &Evidence, outcome: &Outcome) -> Vec<ProbeHits> {
    PROBES
        .iter()
        .filter_map(|spec| {
            let libraries: Vec<&str> =
                outcome.libraries.iter().filter(|l| l.symbols.contains(&spec.symbol)).map(|l| l.library.name.as_str()).collect();
            if libraries.is_empty() {
                return None;
            }
            let hits = ev.threads.values().map(|t| t.hits[spec.id as usize]).sum();
            Some(ProbeHits { symbol: spec.symbol.into(), library: libraries.join(", "), hits })
        })
        .collect()
}

/// The window: its length, why it ended, and its stretches (`phases`).
fn window(outcome: &Outcome, time: Option<&crate::evidence::time_account::TimeAccount>) -> Window {
    let window_ns = outcome.end_ns.saturating_sub(outcome.start_ns);
    Window {
        duration_s: secs(window_ns),
        stopped_by: serde_json::to_value(outcome.stopped_by).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
        active_s: secs(time.map_or(window_ns, |t| t.window_ns)),
        phases: time.map_or_else(Vec::new, |t| {
            let startup = t.startup.as_ref().map(|s| (s.from_ns, s.mark.at_ns));
            phases(&t.pauses, t.span, startup, outcome.start_ns, outcome.end_ns)
        }),
    }
}

/// What leaving the start-up out means for the figures (under 400 characters, as every note).
fn startup_note(s: &crate::evidence::time_account::SkippedStartUp) -> String {
    format!(
        "the job's start-up ({:.1} s before its steps kept their beat: loading, reading, warming up) is left out of the time account and \
         the diagnoses, as pauses are (window.phases: startup); host sites and waker shares still include it",
        s.ns() as f64 / 1e9
    )
}

/// The window as stretches, in seconds from its start: `active`, `paused`, `startup` (the
/// job's start-up, `detect::startup`: from the stretch's start to where the account begins)
/// and `outside` (before the launching threads began their work or after they ended,
/// `span`); empty when the whole window is active.
fn phases(pauses: &[(u64, u64)], span: (u64, u64), startup: Option<(u64, u64)>, start_ns: u64, end_ns: u64) -> Vec<crate::model::Phase> {
    let s = |ns: u64| secs(ns.saturating_sub(start_ns));
    let phase = |from: u64, to: u64, kind: &str| crate::model::Phase { start_s: s(from), end_s: s(to), kind: kind.into() };
    let (span0, span1) = (span.0.clamp(start_ns, end_ns), span.1.clamp(start_ns, end_ns).max(span.0.clamp(start_ns, end_ns)));
    let mut out = Vec::new();
    let began = startup.map_or(span0, |(from, _)| from.clamp(start_ns, span0));
    if began > start_ns {
        out.push(phase(start_ns, began, "outside"));
    }
    if began < span0 {
        out.push(phase(began, span0, "startup"));
    }
    let mut at = span0;
    for &(p0, p1) in pauses {
        let (p0, p1) = (p0.clamp(span0, span1), p1.clamp(span0, span1));
        if p0 > at {
            out.push(phase(at, p0, "active"));
        }
        if p1 > p0 {
            out.push(phase(p0, p1, "paused"));
        }
        at = at.max(p1);
    }
    if at < span1 {
        out.push(phase(at, span1, "active"));
    }
    if span1 < end_ns {
        out.push(phase(span1, end_ns, "outside"));
    }
    if out.len() == 1 {
        out.clear();
    }
    out
}

fn time_account(account: &crate::evidence::time_account::TimeAccount) -> crate::model::TimeAccountReport {
    let window_ns = account.window_ns;
    let fraction = |ns: u64| if window_ns == 0 { 0.0 } else { ns as f64 / window_ns as f64 };
    crate::model::TimeAccountReport {
        tid: account.threads.first().copied().unwrap_or(0),
        window_s: secs(window_ns),
        buckets: account
            .buckets()
            .iter()
            .map(|&(name, ns)| crate::model::Bucket { name, seconds: secs(ns), fraction: fraction(ns) })
            .collect(),
        threads: account.threads.clone(),
        concurrent: account.concurrent,
        parts: account
            .parts()
            .iter()
            .map(|&(name, bucket, ns)| crate::model::Part {
                name: name.into(),
                bucket,
                seconds: secs(ns),
                fraction: fraction(ns),
            })
            .collect(),
        waits: crate::evidence::waits::WaitKind::ALL.iter().zip(account.waits_ns).map(|(k, ns)| (k.name().to_owned(), secs(ns))).collect(),
        wakers: account
            .wakers
            .iter()
            .take(8)
            .map(|w| crate::model::Waker {
                kind: w.kind.name().into(),
                seconds: secs(w.ns),
                count: w.count,
                tid: w.tid,
                waker: w.who(),
                site: w.site.clone(),
            })
            .collect(),
    }
}

/// The note of a budget the window did not keep.
fn budget_missed(s: &crate::model::Sampling) -> String {
    if s.achievable {
        format!(
            "--max-overhead {}: the window's estimated cost is above the budget (tracer.overhead): the budget is kept over whole periods, and the \
             first 50 ms, or launches resumed after a quiet spell (when every probe is back on), are paid back only over the seconds that \
             follow, which this window did not have",
            s.max_overhead_pct
        )
    } else {
        format!(
            "--max-overhead {}: the budget cannot be kept by taking probes off: those never taken off (allocations, pinning, contexts) alone, or \
             the others at the shortest duty cycle, cost more (tracer.overhead.per_probe)",
            s.max_overhead_pct
        )
    }
}
