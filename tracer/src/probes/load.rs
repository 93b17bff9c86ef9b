//! Loading the eBPF object: every program verified at once, the maps created, the task
//! tracepoints attached (before any uprobe, so that no child is missed).

use super::{OBJECT, ProbeSet, Scope, Startup, TRACEPOINT_GROUPS, TracepointGroup, attach_tracepoint_groups, ebpf_log, entry_only_decision, has_return, hash_map_id, kernel_layout, load_configured, map_error, ms_since, return_program, cpu_sampler, uprobes};
use aya::Ebpf;
use aya::maps::HashMap as BpfHashMap;
use aya::maps::MapData;
use aya::maps::PerCpuArray;
use aya::maps::RingBuf;
use crate::error::Result;
use crate::error::TraceError;
use crate::stacks::copied::CopiedStacks;
use gputrace_common::PROBES;
use std::collections::BTreeMap;

impl ProbeSet {
    /// Load every program (so a verifier problem shows at once, not mid-trace), attach the
    /// task tracepoints, and hand back the ring buffer for the reader.
    pub fn load() -> Result<(Self, RingBuf<MapData>)> {
        Self::load_scoped(Scope::Tree)
    }

    /// As [`Self::load`], for the given scope.
    pub fn load_scoped(scope: Scope) -> Result<(Self, RingBuf<MapData>)> {
        if OBJECT.is_empty() {
            return Err(TraceError::NoEbpfObject);
        }
        crate::preflight::check()?;
        // A sweep watches every process's CUDA calls and attaches no tracepoint at all.
        let kernel = match scope {
            Scope::Tree => kernel_layout(),
            Scope::AllCuda => Err("no tracepoints are attached in a sweep".to_owned()),
        };
        let mut notes = Vec::new();
        let stacks_wanted = scope == Scope::Tree && cpu_sampler::wanted();
        let mut startup = Startup::default();
        let phase = std::time::Instant::now();
        let log_wanted = ebpf_log::wanted();
        let mut ebpf = load_configured(scope, kernel.as_ref().ok(), stacks_wanted, log_wanted)?;
        let ebpf_log = if log_wanted { ebpf_log::Reader::start(&mut ebpf) } else { None };
        startup.load_ms = ms_since(phase);
        let phase = std::time::Instant::now();

        let mut uprobes = load_uprobes(&mut ebpf, &mut notes)?;

        startup.verifier_ms = ms_since(phase);
        let phase = std::time::Instant::now();
        let entry_only = entry_only_decision(&mut ebpf, &mut notes, &mut uprobes);
        if entry_only {
            // No return will free a call's slot: the entries must not take one (maps.rs).
            let mut flag = aya::maps::Array::<_, u32>::try_from(ebpf.map_mut("ENTRY_ONLY").ok_or_else(|| map_error("ENTRY_ONLY"))?)
                .map_err(|_| map_error("ENTRY_ONLY"))?;
            flag.set(0, &1, 0).map_err(|_| map_error("ENTRY_ONLY"))?;
        }
        startup.return_check_ms = ms_since(phase);
        let phase = std::time::Instant::now();
        // Before any probe can fire.
        let run_stats = hold_run_stats();
        let mut tracepoint_links = Vec::new();
        let groups: &[TracepointGroup] = if scope == Scope::Tree { &TRACEPOINT_GROUPS } else { &[] };
        let attached = attach_tracepoint_groups(&mut ebpf, groups, kernel.as_ref().map_err(String::as_str), &mut tracepoint_links, &mut notes);
        let [_tasks_followed, sched_traced, io_traced, waking_attached, _io_start_attached] = attached;
        // Wakers only mean something on top of the scheduler accounting.
        let wakers_traced = waking_attached && sched_traced;
        // The sampler measures the probes' cost in the job too (`TRAP_SAMPLES`): on with `--no-stacks`.
        let sampler_running = scope == Scope::Tree && cpu_sampler::attach_or_note(&mut ebpf, stacks_wanted, &mut notes);
        let cpu_sampled = sampler_running && stacks_wanted;
        startup.tracepoints_ms = ms_since(phase);

        let take = |ebpf: &mut Ebpf, name: &str| ebpf.take_map(name).ok_or_else(|| map_error(name));
        let traced = BpfHashMap::try_from(take(&mut ebpf, "TRACED")?).map_err(|_| map_error("TRACED"))?;
        let threads_map = take(&mut ebpf, "THREADS")?;
        let threads_id = hash_map_id(&threads_map);
        // Left in the `Ebpf`: only the Python reader's thread writes it, by a handle of its own.
        let python_read_id = ebpf.map("PYTHON_READ").and_then(hash_map_id);
        let python_threads_id = ebpf.map("PY_THREADS").and_then(hash_map_id);
        let threads = BpfHashMap::try_from(threads_map).map_err(|_| map_error("THREADS"))?;
        let loss = PerCpuArray::try_from(take(&mut ebpf, "LOSS")?).map_err(|_| map_error("LOSS"))?;
        let ring = RingBuf::try_from(take(&mut ebpf, "EVENTS")?).map_err(|_| map_error("EVENTS"))?;
        let sched = BpfHashMap::try_from(take(&mut ebpf, "SCHED")?).map_err(|_| map_error("SCHED"))?;
        let preempted_by = BpfHashMap::try_from(take(&mut ebpf, "PREEMPTED_BY")?).map_err(|_| map_error("PREEMPTED_BY"))?;
        let wakes = BpfHashMap::try_from(take(&mut ebpf, "WAKES")?).map_err(|_| map_error("WAKES"))?;
        let wake_stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "WAKE_STACKS")?).map_err(|_| map_error("WAKE_STACKS"))?;
        let samples = BpfHashMap::try_from(take(&mut ebpf, "SAMPLES")?).map_err(|_| map_error("SAMPLES"))?;
        let trap_samples = BpfHashMap::try_from(take(&mut ebpf, "TRAP_SAMPLES")?).map_err(|_| map_error("TRAP_SAMPLES"))?;
        let user_stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "USER_STACKS")?).map_err(|_| map_error("USER_STACKS"))?;
        let alloc_stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "ALLOC_STACKS")?).map_err(|_| map_error("ALLOC_STACKS"))?;
        Ok((
            Self {
                ebpf,
                traced,
                threads,
                threads_id,
                python_read_id,
                python_threads_id,
                loss,
                sched,
                preempted_by,
                wakes,
                wake_stacks,
                samples,
                trap_samples,
                user_stacks,
                alloc_stacks,
                run_stats,
                exiting: Vec::new(),
                copied: CopiedStacks::default(),
                attached: BTreeMap::new(),
                refused: std::collections::BTreeSet::new(),
                library_files: Vec::new(),
                shed_sites: Vec::new(),
                shed: None,
                off: [false; gputrace_common::PROBE_SLOTS],
                ever_off: [false; gputrace_common::PROBE_SLOTS],
                call_epoch: std::sync::Arc::default(),
                notes,
                later_notes: Vec::new(),
                startup,
                uprobes,
                tracepoint_links,
                tracepoints_closing: None,
                sched_traced,
                io_traced,
                wakers_traced,
                cpu_sampled,
                sampler_running,
                stacks_wanted,
                entry_only,
                ebpf_log,
            },
            ring,
        ))
    }
}

/// Every uprobe program, loaded for the kind of link this kernel takes (with a note where
/// that is not multi-uprobe links).
fn load_uprobes(ebpf: &mut Ebpf, notes: &mut Vec<String>) -> Result<uprobes::Uprobes> {
    let (mut uprobes, links_note) = uprobes::Uprobes::new();
    notes.extend(links_note);
    let programs: Vec<String> = PROBES
        .iter()
        .flat_map(|spec| std::iter::once(spec.symbol.to_owned()).chain(has_return(spec).then(|| return_program(spec.symbol))))
        .collect();
    let fallback_note =
        uprobes.prepare_all(ebpf, &programs).map_err(|(program, source)| TraceError::LoadProgram { program, source: Box::new(source) })?;
    notes.extend(fallback_note);
    Ok(uprobes)
}

/// The kernel's accounting of our programs' run time per call, for the overhead estimate
/// (`program_costs`), held while the returned descriptor is. Costs two clock reads a program
/// run. `GPUTRACE_BPF_STATS=off`: the per-call cost benchmark's switch, to measure what the
/// accounting itself costs (docs/benchmarks.md); not a user setting.
fn hold_run_stats() -> Option<std::os::fd::OwnedFd> {
    if std::env::var_os("GPUTRACE_BPF_STATS").is_some_and(|v| v == "off") {
        return None;
    }
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| log::info!("the programs' run time is not measured: {e}")).ok()
}
