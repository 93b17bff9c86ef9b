//! Loading gputrace's eBPF object, attaching its programs and owning its maps.
//!
//! Uprobes are attached per library *inode* and for every process (no pid filter): the kernel
//! programs filter on the `TRACED` set, which follows the process tree through the task
//! tracepoints, so children, exec'd workers and libraries loaded later are all covered.

pub mod floor;
mod layout;
mod multi_link;
pub mod return_safety;
pub mod sampler;
mod shedding;
pub mod tracefs;
pub mod trap_cost;
pub mod uprobes;

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    os::fd::OwnedFd,
};

use aya::{
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{
        trace_point::{TracePointLink, TracePointLinkId},
        TracePoint,
    },
    Ebpf, EbpfLoader,
};
use gputrace_common::{
    globals, host::LAYOUT_GLOBAL, loss, stack_source, ProbeSpec, Shed, SampleKey, SampleStats, ThreadCounters, ThreadSched, WakeKey, WakeStats, ALLOCATOR_SYMBOLS, PROBES,
};

use crate::{
    decode::UserStack,
    stacks::copied::{self, CopiedStacks, UnwindCounts},
    discover::{
        files::{self, open_same_file, Links},
        libraries::Library,
        symbols,
    },
    error::{Result, TraceError},
};

/// The compiled eBPF object (empty when built with `GPUTRACE_EBPF_STUB`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gputrace"));

/// Whether a probe has a return program (`<symbol>_ret`).
fn has_return(spec: &ProbeSpec) -> bool {
    gputrace_common::has_return_program(spec.id)
}

/// Whether this kernel takes multi-uprobe links (loads a two-instruction program: needs the
/// privileges to). For `doctor`.
#[must_use]
pub fn multi_uprobe_links_supported() -> bool {
    multi_link::supported()
}


fn return_program(symbol: &str) -> String {
    format!("{symbol}_ret")
}

/// One library we attached to, and which of our symbols it has.
#[derive(Clone, Debug)]
pub struct AttachedLibrary {
    pub library: Library,
    pub symbols: Vec<&'static str>,
    /// Traced processes seen mapping this file (`target.cuda_loaded` means one did).
    pub mapped_by: BTreeSet<u32>,
    /// Traced processes that had this file mapped before it was probed: their calls from
    /// the mapping to the probing (at most one rescan interval) were not seen.
    pub probed_late_for: BTreeSet<u32>,
    /// What each probed symbol's first instruction is, which sets what its trap costs.
    pub entry: BTreeMap<&'static str, trap_cost::EntryKind>,
}

impl AttachedLibrary {
    fn default_for(library: &Library) -> Self {
        Self {
            library: library.clone(),
            symbols: Vec::new(),
            mapped_by: BTreeSet::new(),
            probed_late_for: BTreeSet::new(),
            entry: BTreeMap::new(),
        }
    }
}

/// The eBPF programs loaded into the kernel, their maps and their links (not a CUDA kernel).
/// Dropping it detaches everything.
#[expect(clippy::struct_excessive_bools, reason = "each flag says what this kernel let us collect; they are independent")]
pub struct ProbeSet {
    ebpf: Ebpf,
    traced: BpfHashMap<MapData, u32, u32>,
    threads: BpfHashMap<MapData, u32, ThreadCounters>,
    threads_id: Option<u32>,
    loss: PerCpuArray<MapData, u64>,
    sched: BpfHashMap<MapData, u32, ThreadSched>,
    preempted_by: aya::maps::HashMap<MapData, u32, u64>,
    wakes: BpfHashMap<MapData, WakeKey, WakeStats>,
    wake_stacks: aya::maps::StackTraceMap<MapData>,
    samples: BpfHashMap<MapData, SampleKey, SampleStats>,
    user_stacks: aya::maps::StackTraceMap<MapData>,
    alloc_stacks: aya::maps::StackTraceMap<MapData>,
    /// Held while the kernel keeps our programs' run time (`BPF_ENABLE_STATS`; the
    /// accounting stops when the last holder closes it). None where it was refused.
    run_stats: Option<OwnedFd>,
    /// Processes whose leader reported its exit, and when: they stay in `TRACED` until the
    /// leader's final switch (`untrace_exited`).
    exiting: Vec<(u32, std::time::Instant)>,
    /// Copied user stacks, unwound (`stacks::copied`): samples, spells and allocations count
    /// under their interned ids.
    copied: CopiedStacks,
    attached: BTreeMap<(u64, u64), AttachedLibrary>,
    /// The attached libraries' files, open: their probes name them by descriptor.
    library_files: Vec<OwnedFd>,
    /// Every probe the overhead budget may take off, by place, and what it has off now
    /// (`shedding`).
    shed_sites: Vec<shedding::ShedSite>,
    shed: Option<Shed>,
    /// By probe id: off now, and off at some point.
    off: [bool; gputrace_common::PROBE_SLOTS],
    ever_off: [bool; gputrace_common::PROBE_SLOTS],
    /// The call epoch written to `CALL_EPOCH` (`shedding`).
    call_epoch: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// What could not be set up, in sentences for the report (degraded, not fatal).
    pub notes: Vec<String>,
    /// The same, found after the start (a symbol refused in a library probed later).
    later_notes: Vec<String>,
    /// Where the loading time went (the session adds the attaching and the total).
    pub startup: Startup,
    /// Every attachment, so that `detach` can undo them all at once.
    uprobes: uprobes::Uprobes,
    tracepoint_links: Vec<(&'static str, TracePointLinkId)>,
    /// The tracepoints, being closed since the window ended (`start_detaching_tracepoints`).
    tracepoints_closing: Option<std::thread::JoinHandle<()>>,
    /// Which tracepoint groups are attached (see `TRACEPOINT_GROUPS`).
    pub sched_traced: bool,
    pub io_traced: bool,
    /// Whether wakeups are attributed to their wakers (`sched_waking`).
    pub wakers_traced: bool,
    /// Whether the CPU sampler runs (user stacks on CPU); off-CPU stacks come with
    /// `sched_traced` when stacks are wanted.
    pub cpu_sampled: bool,
    /// Whether stacks were wanted at all (not `--no-stacks`).
    pub stacks_wanted: bool,
    /// Return probes are off: calls are counted from their entries only.
    pub entry_only: bool,
}

pub use crate::model::Startup;

fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Set by `--entry-only`: never attach return probes.
static FORCE_ENTRY_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Ask for entry-only mode whatever the kernel check says.
pub fn force_entry_only() {
    FORCE_ENTRY_ONLY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Set by `--tensors`: probe caching allocators (cleared again when the overhead budget takes
/// them off for good).
static ALLOCATORS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Probe caching allocators from now on (`--tensors`).
pub fn probe_allocators() {
    ALLOCATORS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Probe no caching allocator found from now on.
pub fn leave_allocators_unprobed() {
    ALLOCATORS.store(false, std::sync::atomic::Ordering::Relaxed);
}

/// Whether caching allocators are probed.
#[must_use]
pub fn allocators_probed() -> bool {
    ALLOCATORS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reads format files from a mounted tracefs.
struct TraceFs(std::path::PathBuf);
impl layout::Formats for TraceFs {
    fn format(&self, category: &str, name: &str) -> Option<String> {
        tracefs::format(&self.0, category, name).ok()
    }
}

impl std::fmt::Debug for ProbeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeSet").field("attached", &self.attached).finish_non_exhaustive()
    }
}

/// Whether to leave return probes off, with a note saying why when they are; the check's
/// probe goes to `links`.
fn entry_only_decision(ebpf: &mut Ebpf, notes: &mut Vec<String>, links: &mut uprobes::Uprobes) -> bool {
    const CONSEQUENCE: &str = "calls are counted from their entries (tracer.probes), without durations, copy sizes or \
         classification, sync waits or allocations";
    if FORCE_ENTRY_ONLY.load(std::sync::atomic::Ordering::Relaxed) {
        notes.push(format!("entry-only mode (--entry-only): return probes are off; {CONSEQUENCE}"));
        return true;
    }
    let Some(program) = PROBES.iter().find(|s| has_return(s)).map(|s| return_program(s.symbol)) else { return false };
    let safety = return_safety::check(ebpf, &program, links);
    log::info!("return probes under seccomp: {safety:?}");
    if safety.safe() {
        return false;
    }
    let why = match safety {
        return_safety::Safety::Killed => "this kernel kills a process under a seccomp filter when a probed function returns \
             (its uretprobe system call is filtered; probed at start)"
            .to_owned(),
        other => format!("return probes could not be shown safe for processes under seccomp ({other:?})"),
    };
    log::warn!("{why}: return probes are off");
    notes.push(format!("entry-only mode: {why}; return probes are off, since they would apply to every process mapping the library; {CONSEQUENCE}"));
    true
}

/// Offsets of `pid` and `clone_flags` in `task:task_newtask`, from tracefs where mounted.
fn newtask_offsets(tracefs: Option<&std::path::PathBuf>) -> (u32, u32) {
    let format = tracefs.and_then(|root| tracefs::format(root, "task", "task_newtask").ok());
    let offset = |field: &str, default: u32| format.as_deref().and_then(|f| tracefs::field_offset(f, field)).unwrap_or(default);
    (offset("pid", 8), offset("clone_flags", 32))
}

fn map_error(name: &str) -> TraceError {
    TraceError::Map { name: name.to_owned() }
}

/// Which processes the probes count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The `TRACED` process tree, followed by the task tracepoints, with scheduler and block
    /// evidence (`attach`, `run`).
    Tree,
    /// Every process's CUDA calls and no tracepoint at all (`sweep`): a host-wide census
    /// must not start per-thread scheduler accounting for every thread on the host.
    AllCuda,
}

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
        let tracefs = match scope {
            Scope::Tree => tracefs::ensure_mounted(),
            Scope::AllCuda => Err(tracefs::Unavailable::Sweep),
        };
        let mut notes = Vec::new();
        let stacks_wanted = scope == Scope::Tree && sampler::wanted();
        let mut startup = Startup::default();
        let phase = std::time::Instant::now();
        let mut ebpf = load_configured(scope, tracefs.as_ref().ok(), stacks_wanted, &mut notes)?;
        startup.load_ms = ms_since(phase);
        let phase = std::time::Instant::now();

        let (mut uprobes, links_note) = uprobes::Uprobes::new(OBJECT, &ebpf);
        notes.extend(links_note);
        for spec in PROBES {
            load_uprobe(&mut ebpf, &uprobes, spec.symbol)?;
            if has_return(spec) {
                load_uprobe(&mut ebpf, &uprobes, &return_program(spec.symbol))?;
            }
        }

        startup.verifier_ms = ms_since(phase);
        let phase = std::time::Instant::now();
        let entry_only = entry_only_decision(&mut ebpf, &mut notes, &mut uprobes);
        if entry_only {
            // No return will free a call's slot: the entries must not take one (maps.rs).
            let mut flag = aya::maps::Array::<_, u32>::try_from(ebpf.map_mut("ENTRY_ONLY").ok_or_else(|| map_error("ENTRY_ONLY"))?)
                .map_err(|_| map_error("ENTRY_ONLY"))?;
            flag.set(0, 1, 0).map_err(|_| map_error("ENTRY_ONLY"))?;
        }
        startup.return_check_ms = ms_since(phase);
        let phase = std::time::Instant::now();
        // Before any probe can fire: the programs' own run time per call, for the overhead
        // estimate (`program_costs`). Costs two clock reads a program run while held.
        // `GPUTRACE_BPF_STATS=off`: the per-call cost benchmark's switch, to measure what the
        // accounting itself costs (docs/benchmarks.md); not a user setting.
        let run_stats = if std::env::var_os("GPUTRACE_BPF_STATS").is_some_and(|v| v == "off") {
            None
        } else {
            aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| log::info!("the programs' run time is not measured: {e}")).ok()
        };
        let mut tracepoint_links = Vec::new();
        let groups: &[(Tracepoints, &str)] = if scope == Scope::Tree { &TRACEPOINT_GROUPS } else { &[] };
        let attached = attach_tracepoint_groups(&mut ebpf, groups, tracefs.as_ref().map(|_| ()), &mut tracepoint_links, &mut notes);
        let [_tasks_followed, sched_traced, io_traced, waking_attached, _io_start_attached] = attached;
        // Wakers only mean something on top of the scheduler accounting.
        let wakers_traced = waking_attached && sched_traced;
        let cpu_sampled = stacks_wanted && sampler::attach_or_note(&mut ebpf, &mut notes);
        startup.tracepoints_ms = ms_since(phase);

        let take = |ebpf: &mut Ebpf, name: &str| ebpf.take_map(name).ok_or_else(|| map_error(name));
        let traced = BpfHashMap::try_from(take(&mut ebpf, "TRACED")?).map_err(|_| map_error("TRACED"))?;
        let threads_map = take(&mut ebpf, "THREADS")?;
        let threads_id = hash_map_id(&threads_map);
        let threads = BpfHashMap::try_from(threads_map).map_err(|_| map_error("THREADS"))?;
        let loss = PerCpuArray::try_from(take(&mut ebpf, "LOSS")?).map_err(|_| map_error("LOSS"))?;
        let ring = RingBuf::try_from(take(&mut ebpf, "EVENTS")?).map_err(|_| map_error("EVENTS"))?;
        let sched = BpfHashMap::try_from(take(&mut ebpf, "SCHED")?).map_err(|_| map_error("SCHED"))?;
        let preempted_by = BpfHashMap::try_from(take(&mut ebpf, "PREEMPTED_BY")?).map_err(|_| map_error("PREEMPTED_BY"))?;
        let wakes = BpfHashMap::try_from(take(&mut ebpf, "WAKES")?).map_err(|_| map_error("WAKES"))?;
        let wake_stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "WAKE_STACKS")?).map_err(|_| map_error("WAKE_STACKS"))?;
        let samples = BpfHashMap::try_from(take(&mut ebpf, "SAMPLES")?).map_err(|_| map_error("SAMPLES"))?;
        let user_stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "USER_STACKS")?).map_err(|_| map_error("USER_STACKS"))?;
        let alloc_stacks = aya::maps::StackTraceMap::try_from(take(&mut ebpf, "ALLOC_STACKS")?).map_err(|_| map_error("ALLOC_STACKS"))?;
        Ok((
            Self {
                ebpf,
                traced,
                threads,
                threads_id,
                loss,
                sched,
                preempted_by,
                wakes,
                wake_stacks,
                samples,
                user_stacks,
                alloc_stacks,
                run_stats,
                exiting: Vec::new(),
                copied: CopiedStacks::default(),
                attached: BTreeMap::new(),
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
                stacks_wanted,
                entry_only,
            },
            ring,
        ))
    }

    /// Start counting a process (all its threads).
    pub fn trace_process(&mut self, tgid: u32) -> Result<()> {
        self.traced.insert(tgid, 0, 0).map_err(|_| map_error("TRACED"))
    }

    /// Start the scheduler clock of a thread that exists already, in the state `/proc` shows
    /// (a thread that runs until it exits would otherwise never be seen switching).
    pub fn seed_thread(&mut self, tid: u32, process: u32, state: u32, now_ns: u64) {
        let s = ThreadSched { tgid: process, state, since_ns: now_ns, ..ThreadSched::default() };
        // NOEXIST: a switch seen meanwhile knows better.
        let _ = self.sched.insert(tid, s, 1);
    }

    /// Stop counting a process that has exited.
    pub fn untrace_process(&mut self, tgid: u32) {
        let _ = self.traced.remove(&tgid);
    }

    /// A process's leader has run its exit: it leaves `TRACED` at its final switch, not now.
    /// The exit tracepoint fires before the task has finished exiting (freeing its memory
    /// and files can block and be switched again); untraced at once, its last switches go
    /// unseen, and its scheduler clock would run on as "on the CPU" until the window ends.
    pub fn process_exiting(&mut self, tgid: u32) {
        self.exiting.push((tgid, std::time::Instant::now()));
    }

    /// Untrace the exiting processes whose leader's final switch was seen (`final_of`, the
    /// leader whose totals just arrived), and any that have been exiting for over a second
    /// (a final switch lost to a full ring buffer must not keep a reusable pid traced).
    pub fn untrace_exited(&mut self, final_of: Option<u32>) {
        const GRACE: std::time::Duration = std::time::Duration::from_secs(1);
        if self.exiting.is_empty() {
            return;
        }
        let gone: Vec<u32> = self.exiting.iter().filter(|(tgid, since)| Some(*tgid) == final_of || since.elapsed() > GRACE).map(|(tgid, _)| *tgid).collect();
        self.exiting.retain(|(tgid, _)| !gone.contains(tgid));
        for tgid in gone {
            self.untrace_process(tgid);
        }
    }

    /// Processes in the traced set (including children added by the kernel).
    #[must_use]
    pub fn traced_processes(&self) -> Vec<u32> {
        self.traced.keys().filter_map(std::result::Result::ok).collect()
    }

    /// Attach every probe the library exports. Returns false if this inode was already
    /// attached (the probes already cover every process that maps it).
    pub fn attach_library(&mut self, library: &Library) -> Result<bool> {
        let key = (library.dev, library.inode);
        if self.attached.contains_key(&key) {
            return Ok(false);
        }
        // Read and probed through one descriptor of the very file found: a path checked
        // and then used again could name another file by then (its directory may be the
        // job owner's), and root would read or probe that one.
        let file = open_library(library)?;
        let library = &Library { open_path: files::through(&file), ..library.clone() };
        let allocator = crate::discover::libraries::is_allocator_library(library.file_name());
        let offsets: HashMap<String, u64> = if allocator {
            // Local C++ functions, by demangled name and signature; each keyed by its program.
            let found = symbols::demangled_offsets(&library.open_path, &ALLOCATOR_SYMBOLS).map_err(|e| e.naming(&library.name))?;
            if found.is_empty() {
                self.later_notes.push(format!(
                    "{}: the caching allocator's functions were not found (a stripped library, or a release whose signatures differ from those known): GPU memory is seen at the driver level only",
                    library.name
                ));
            }
            found.into_iter().map(|(program, offset)| (program.to_owned(), offset)).collect()
        } else {
            let wanted: Vec<&str> = PROBES.iter().map(|p| p.symbol).collect();
            symbols::file_offsets(&library.open_path, &wanted).map_err(|e| e.naming(&library.name))?
        };
        let mut attached = Vec::new();
        let mut entry = BTreeMap::new();
        // Whole or not at all when the file goes away mid-attach (its process exited): a
        // library half probed and not marked attached would be probed again by the next
        // rescan, counting the first half's hits twice. A symbol the kernel refuses on its
        // own (an instruction it cannot probe) is left out, with a note.
        let library_mark = self.uprobes.mark();
        for spec in PROBES {
            let Some(&offset) = offsets.get(spec.symbol) else { continue };
            let symbol_mark = self.uprobes.mark();
            if Shed::may_take(spec) {
                self.shed_sites.push(shedding::ShedSite { spec, offset, library: library.clone() });
                if self.is_off(spec) {
                    // The overhead budget has this probe off: it goes on with the others.
                    entry.insert(spec.symbol, trap_cost::entry_kind_at(&library.open_path, offset));
                    attached.push(spec.symbol);
                    continue;
                }
            }
            // The return first: a call entered between the two would take a slot that no
            // return frees, and its thread would read as inside that call from then on. A
            // return whose entry was not seen is only counted as unmatched.
            let mut both = if has_return(spec) && !self.entry_only { self.attach_one(&return_program(spec.symbol), offset, library) } else { Ok(()) };
            if both.is_ok() {
                both = self.attach_one(spec.symbol, offset, library);
            }
            match both {
                Ok(()) => {
                    entry.insert(spec.symbol, trap_cost::entry_kind_at(&library.open_path, offset));
                    attached.push(spec.symbol);
                }
                Err(e) if e.file_gone() => {
                    self.uprobes.undo_to(&mut self.ebpf, library_mark);
                    self.shed_sites.retain(|s| (s.library.dev, s.library.inode) != key);
                    return Err(e);
                }
                Err(e) => {
                    self.uprobes.undo_to(&mut self.ebpf, symbol_mark);
                    self.shed_sites.retain(|s| (s.library.dev, s.library.inode, s.spec.symbol) != (key.0, key.1, spec.symbol));
                    log::warn!("{e}");
                    self.later_notes.push(format!("{} not probed in {} ({e}): its calls are not counted", spec.symbol, library.name));
                }
            }
        }
        if attached.is_empty() && !offsets.is_empty() {
            return Err(TraceError::NothingProbed { library: library.name.clone().into() });
        }
        if allocator {
            log::info!("probed {} of {} caching-allocator functions in {}", attached.len(), ALLOCATOR_SYMBOLS.len(), library.name);
        } else {
            log::info!("probed {} of {} CUDA symbols in {}", attached.len(), PROBES.len(), library.name);
        }
        // Kept open while its probes may be put back (the overhead budget's launch probes).
        self.library_files.push(file);
        self.attached.insert(key, AttachedLibrary { library: library.clone(), symbols: attached, entry, ..AttachedLibrary::default_for(library) });
        Ok(true)
    }

    /// Note that traced process `pid` maps `library` (already attached). `late`: it mapped
    /// the file before the probes were attached, while it ran traced.
    pub fn note_mapping(&mut self, library: &Library, pid: u32, late: bool) {
        if let Some(a) = self.attached.get_mut(&(library.dev, library.inode)) {
            a.mapped_by.insert(pid);
            if late {
                a.probed_late_for.insert(pid);
            }
        }
    }

    fn attach_one(&mut self, program: &str, offset: u64, library: &Library) -> Result<()> {
        self.uprobes.attach(&mut self.ebpf, program, offset, &library.open_path).map_err(|source| TraceError::AttachUprobe {
            symbol: program.to_owned(),
            library: library.name.clone().into(),
            source: Box::new(source),
        })
    }

    /// What a trap costs on this kernel, by the instruction it sits on (`trap_cost`).
    pub fn measure_trap_costs(&mut self) -> std::result::Result<trap_cost::TrapCosts, String> {
        trap_cost::calibrate(&mut self.ebpf, &mut self.uprobes)
    }

    /// What our CUDA probes' programs took per run so far, by probe id (entry and return
    /// program; the kernel's own accounting, `run_stats`). Runs in processes we do not trace
    /// stop at the first check, so the mean slightly understates a traced call. Empty where
    /// the accounting is off.
    #[must_use]
    pub fn program_costs(&self) -> BTreeMap<u32, trap_cost::ProgramNs> {
        if self.run_stats.is_none() {
            return BTreeMap::new();
        }
        let per_run = |name: &str| {
            let (ns, runs) = self.uprobes.run_time(&self.ebpf, name)?;
            (runs > 0).then(|| (ns as f64 / runs as f64, runs))
        };
        PROBES
            .iter()
            .filter_map(|spec| {
                let entry = per_run(spec.symbol);
                let ret = has_return(spec).then(|| per_run(&return_program(spec.symbol))).flatten();
                (entry.is_some() || ret.is_some()).then(|| {
                    let (entry_ns, runs) = entry.unwrap_or_default();
                    (spec.id, trap_cost::ProgramNs { entry_ns, return_ns: ret.map_or(0.0, |r| r.0), runs })
                })
            })
            .collect()
    }

    /// Notes found since the start (taken once: the caller adds them to its own).
    pub fn take_later_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.later_notes)
    }

    /// How the uprobes are attached.
    #[must_use]
    pub fn uprobe_link_kind(&self) -> uprobes::LinkKind {
        self.uprobes.kind()
    }

    #[must_use]
    pub fn attached_libraries(&self) -> Vec<AttachedLibrary> {
        self.attached.values().cloned().collect()
    }

    /// One thread's counters and scheduler accounting, looked up by key (a system call
    /// each), for the timeline's marks (`evidence::timeline`); None where it has none.
    #[must_use]
    pub fn thread_now(&self, tid: u32) -> (Option<ThreadCounters>, Option<ThreadSched>) {
        (self.threads.get(&tid, 0).ok(), self.sched.get(&tid, 0).ok())
    }

    /// Counters of every thread the kernel currently holds.
    #[must_use]
    pub fn thread_counters(&self) -> Vec<(u32, ThreadCounters)> {
        self.threads.iter().filter_map(std::result::Result::ok).collect()
    }

    /// Read and delete one exited thread's counters, keeping the map bounded by live threads.
    pub fn take_thread(&mut self, tid: u32) -> Option<ThreadCounters> {
        let value = self.threads.get(&tid, 0).ok()?;
        let _ = self.threads.remove(&tid);
        Some(value)
    }

    /// Scheduler accounting of every traced thread alive now.
    #[must_use]
    pub fn sched_stats(&self) -> Vec<(u32, ThreadSched)> {
        self.sched.iter().filter_map(std::result::Result::ok).collect()
    }

    /// Who took the CPU from traced threads (thread id, times).
    #[must_use]
    pub fn preempted_by(&self) -> Vec<(u32, u64)> {
        self.preempted_by.iter().filter_map(std::result::Result::ok).collect()
    }

    /// Off-CPU time by wakeup kind, cumulative (`WAKES`).
    #[must_use]
    pub fn wakes(&self) -> Vec<(WakeKey, WakeStats)> {
        self.wakes.iter().filter_map(std::result::Result::ok).collect()
    }

    /// The instruction pointers of a waker's kernel stack, innermost first.
    #[must_use]
    pub fn wake_stack(&self, id: i64) -> Vec<u64> {
        stack_ips(&self.wake_stacks, id)
    }

    /// The id of the `THREADS` map, for readers on other threads to open a handle of their own.
    #[must_use]
    pub fn threads_map_id(&self) -> Option<u32> {
        self.threads_id
    }

    /// CPU samples and off-CPU spells by user stack, cumulative: the kernel's (`SAMPLES`) and
    /// those of copied stacks, under their interned ids.
    #[must_use]
    pub fn samples(&self) -> Vec<(SampleKey, SampleStats)> {
        self.copied.samples(self.samples.iter().filter_map(std::result::Result::ok).collect())
    }

    /// The instruction pointers of a traced thread's user stack, innermost first.
    #[must_use]
    pub fn user_stack(&self, id: i64) -> Vec<u64> {
        if copied::is_interned(id) {
            return self.copied.ips(id);
        }
        stack_ips(&self.user_stacks, id)
    }

    /// The instruction pointers of a device allocation's user stack (`ALLOC_STACKS`, the id
    /// an allocation call carries, or an interned copied stack), innermost first.
    #[must_use]
    pub fn alloc_stack(&self, id: i64) -> Vec<u64> {
        if copied::is_interned(id) {
            return self.copied.ips(id);
        }
        stack_ips(&self.alloc_stacks, id)
    }

    /// Unwind a stack the kernel copied, and count or remember it (`stacks::copied`).
    pub fn take_copied_stack(&mut self, copy: &UserStack<'_>) {
        let maps = if copy.event.source == stack_source::ALLOC { &self.alloc_stacks } else { &self.user_stacks };
        self.copied.take(copy, |id| stack_ips(maps, id));
    }

    /// The stack id an allocation's call record should carry (its copy's swapped for the
    /// interned stack; others unchanged).
    pub fn alloc_stack_id(&mut self, id: i64) -> i64 {
        self.copied.alloc_stack(id)
    }

    /// Move the final counts under replaced copies out of the kernel's `SAMPLES`, which
    /// would otherwise fill with one key per copy; returns the samples as `samples` does,
    /// from the same one reading of the map (each entry read costs two system calls, and a
    /// second pass every 200 ms cost the tracer as much as the unwinding).
    pub fn fold_copied_samples(&mut self) -> Vec<(SampleKey, SampleStats)> {
        let kernel: Vec<(SampleKey, SampleStats)> = self.samples.iter().filter_map(std::result::Result::ok).collect();
        let folded = self.copied.fold(&kernel);
        for key in &folded {
            let _ = self.samples.remove(key);
        }
        let kept = kernel.into_iter().filter(|(k, _)| !folded.contains(k)).collect();
        self.copied.samples(kept)
    }

    /// Process `pid` exec'd (its copied stacks unwind by its new image's files) or exited.
    pub fn forget_unwinding(&mut self, pid: u32) {
        self.copied.forget(pid);
    }

    /// How the copied stacks' walks went.
    #[must_use]
    pub fn unwind_counts(&self) -> UnwindCounts {
        self.copied.counts
    }

    /// Detach everything, in parallel: multi-uprobe links then wait for their grace periods
    /// together (docs/facts.md: 63 perf-event uprobes took 6.8 s to close, one after another
    /// under the kernel's event mutex; one multi link, 24 ms).
    pub fn detach(mut self) {
        let uprobes = self.uprobes.take_all(&mut self.ebpf);
        let tracepoints = take_tracepoint_links(&mut self.ebpf, std::mem::take(&mut self.tracepoint_links));
        std::thread::scope(|scope| {
            scope.spawn(|| detach_timed("uprobe", uprobes));
            // Empty when `start_detaching_tracepoints` already took them.
            if !tracepoints.is_empty() {
                scope.spawn(|| detach_timed("tracepoint", tracepoints));
            }
        });
        if let Some(closing) = self.tracepoints_closing.take() {
            let _ = closing.join();
        }
    }

    /// Start closing the tracepoints, once the window's last reading is taken: the kernel
    /// closes perf-event tracepoints one at a time, each holding its event mutex across two
    /// grace periods (~40 ms apiece here, 10 of them), so this runs while the report is made
    /// rather than after it. The maps stay readable; `detach` waits for the thread.
    pub fn start_detaching_tracepoints(&mut self) {
        let links = take_tracepoint_links(&mut self.ebpf, std::mem::take(&mut self.tracepoint_links));
        if links.is_empty() || self.tracepoints_closing.is_some() {
            return;
        }
        self.tracepoints_closing = std::thread::Builder::new().name("gputrace-detach".into()).spawn(move || detach_timed("tracepoint", links)).ok();
    }

    /// Loss counters summed over CPUs, indexed by `gputrace_common::loss`.
    #[must_use]
    pub fn losses(&self) -> [u64; loss::COUNT as usize] {
        let mut out = [0; loss::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            if let Ok(values) = self.loss.get(&(i as u32), 0) {
                *slot = values.iter().sum();
            }
        }
        out
    }
}

/// Close `links` at once, each on a thread of its own, and log how long that took.
fn detach_timed<T: Send>(what: &str, links: Vec<T>) {
    let (n, began) = (links.len(), std::time::Instant::now());
    uprobes::drop_all(links);
    log::debug!("detached {n} {what} links in {:.0} ms", began.elapsed().as_secs_f64() * 1e3);
}

/// The instruction pointers of stack `id` in `stacks`, innermost first (none for a negative
/// id: the kernel's "no stack").
fn stack_ips(stacks: &aya::maps::StackTraceMap<MapData>, id: i64) -> Vec<u64> {
    let Ok(id) = u32::try_from(id) else { return Vec::new() };
    stacks.get(&id, 0).map(|st| st.frames().iter().map(|f| f.ip).collect()).unwrap_or_default()
}

/// The kernel's id of a hash map (for readers that open a handle of their own).
fn hash_map_id(map: &aya::maps::Map) -> Option<u32> {
    match map {
        aya::maps::Map::HashMap(data) => data.info().ok().map(|i| i.id()),
        _ => None,
    }
}

fn load_uprobe(ebpf: &mut Ebpf, uprobes: &uprobes::Uprobes, name: &str) -> Result<()> {
    uprobes.prepare(ebpf, name).map_err(|source| TraceError::LoadProgram { program: name.to_owned(), source: Box::new(source) })
}

fn take_tracepoint_links(ebpf: &mut Ebpf, links: Vec<(&'static str, TracePointLinkId)>) -> Vec<TracePointLink> {
    links
        .into_iter()
        .filter_map(|(program, id)| ebpf.program_mut(program).and_then(|p| <&mut TracePoint>::try_from(p).ok())?.take_link(id).ok())
        .collect()
}

/// Tracepoint groups (task following, then `ProbeSet::{sched_traced, io_traced}`):
/// each is attached whole or not at all, and a group that fails only
/// degrades what it feeds (with a note), never the CUDA tracing.
/// (program, category, tracepoint) triples.
type Tracepoints = &'static [(&'static str, &'static str, &'static str)];

const TRACEPOINT_GROUPS: [(Tracepoints, &str); 5] = [
    (
        &[
            ("task_newtask", "task", "task_newtask"),
            ("sched_process_exec", "sched", "sched_process_exec"),
            ("sched_process_exit", "sched", "sched_process_exit"),
        ],
        "child processes are not followed",
    ),
    (
        &[
            ("sched_switch", "sched", "sched_switch"),
            ("sched_wakeup", "sched", "sched_wakeup"),
            ("sched_wakeup_new", "sched", "sched_wakeup_new"),
        ],
        "scheduler figures (on-CPU, run-queue, blocked, sleeping) are unavailable",
    ),
    (
        &[
            ("block_rq_insert", "block", "block_rq_insert"),
            ("block_rq_issue", "block", "block_rq_issue"),
            ("block_rq_complete", "block", "block_rq_complete"),
        ],
        "block I/O is not attributed",
    ),
    (&[("sched_waking", "sched", "sched_waking")], "off-CPU time is not split by who woke the threads"),
    // Kernels before 6.5 lack it; insert and issue still see most requests.
    (&[("block_io_start", "block", "block_io_start")], "block requests issued later by a kernel worker are not attributed"),
];

/// Attach each group of `TRACEPOINT_GROUPS` (none without tracefs); which ones are on, in
/// order. A group that fails leaves a note.
fn attach_tracepoint_groups(
    ebpf: &mut Ebpf,
    groups: &[(Tracepoints, &str)],
    tracefs: std::result::Result<(), &tracefs::Unavailable>,
    links: &mut Vec<(&'static str, TracePointLinkId)>,
    notes: &mut Vec<String>,
) -> [bool; TRACEPOINT_GROUPS.len()] {
    let mut attached = [false; TRACEPOINT_GROUPS.len()];
    for (ok, (group, what)) in attached.iter_mut().zip(groups.iter().copied()) {
        let result = match tracefs {
            Ok(()) => attach_tracepoints(ebpf, group, links).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(()) => *ok = true,
            Err(e) => {
                log::warn!("{what}: {e}");
                // The report keeps the first line; the verifier log went to stderr.
                let first = e.lines().next().unwrap_or_default();
                notes.push(format!("{what}: {}", first.chars().take(300).collect::<String>()));
            }
        }
    }
    attached
}

/// Attach a group whole or not at all: on a failure, what it attached is detached again.
fn attach_tracepoints(ebpf: &mut Ebpf, group: Tracepoints, links: &mut Vec<(&'static str, TracePointLinkId)>) -> Result<()> {
    let mark = links.len();
    let all = attach_each_tracepoint(ebpf, group, links);
    if all.is_err() {
        uprobes::drop_all(take_tracepoint_links(ebpf, links.split_off(mark)));
    }
    all
}

fn attach_each_tracepoint(ebpf: &mut Ebpf, group: Tracepoints, links: &mut Vec<(&'static str, TracePointLinkId)>) -> Result<()> {
    for &(program, category, name) in group {
        let tp: &mut TracePoint = ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or_else(|| TraceError::Program { name: program.to_owned() })?;
        tp.load().map_err(|source| TraceError::LoadProgram { program: program.to_owned(), source: Box::new(source) })?;
        let link = tp.attach(category, name).map_err(|source| TraceError::AttachTracepoint {
            category: category.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        })?;
        links.push((program, link));
    }
    Ok(())
}

/// Load the eBPF object with its globals set for this kernel and scope: the tracepoint
/// layouts read from tracefs (defaults, with a note, where it does not describe a field).
fn load_configured(scope: Scope, tracefs: Option<&std::path::PathBuf>, stacks_wanted: bool, notes: &mut Vec<String>) -> Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    let (pid_off, flags_off) = newtask_offsets(tracefs);
    let layout = match tracefs {
        Some(root) => {
            let (layout, missing) = layout::read(&TraceFs(root.clone()));
            if !missing.is_empty() {
                notes.push(format!("tracepoint fields not described by this kernel (defaults used): {}", missing.join(", ")));
            }
            layout
        }
        None => gputrace_common::Layout::DEFAULT,
    };
    loader.set_global(globals::NEWTASK_PID_OFFSET, &pid_off, true);
    loader.set_global(globals::NEWTASK_FLAGS_OFFSET, &flags_off, true);
    loader.set_global(LAYOUT_GLOBAL, &layout, true);
    let trace_all = u32::from(scope == Scope::AllCuda);
    loader.set_global(globals::TRACE_ALL_CUDA, &trace_all, true);
    let sample_stacks = u32::from(stacks_wanted);
    loader.set_global(globals::SAMPLE_STACKS, &sample_stacks, true);
    // The per-call cost benchmark's A/B switch, not a user setting (docs/benchmarks.md).
    let prompt_every_copy = u32::from(std::env::var_os("GPUTRACE_PROMPT_EVERY_COPY").is_some_and(|v| v == "1"));
    loader.set_global(globals::PROMPT_EVERY_COPY, &prompt_every_copy, true);
    loader.load(OBJECT).map_err(crate::preflight::classify_load_error)
}

/// Open `library` for reading and probing: the file its path names now, if that is the
/// regular file of the library's device and inode.
fn open_library(library: &Library) -> Result<OwnedFd> {
    open_same_file(&library.open_path, (library.dev, library.inode), Links::Follow)
        .map_err(|e| TraceError::io("opening the CUDA library", &library.name, e))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    fn library_at(path: &std::path::Path, dev: u64, inode: u64) -> Library {
        Library { dev, inode, open_path: path.to_path_buf(), name: path.display().to_string() }
    }

    #[test]
    fn a_library_is_opened_only_while_its_path_names_the_file_found() {
        let dir = crate::test_support::scratch("open", "library");
        let path = dir.join("libcuda.so.1");
        std::fs::write(&path, b"\x7fELF").expect("write");
        let md = std::fs::metadata(&path).expect("stat");
        let found = library_at(&path, md.dev(), md.ino());
        let fd = open_library(&found).expect("the file found");
        // Read through the descriptor: the same file, whatever the path names later.
        std::fs::rename(&path, dir.join("moved")).expect("mv");
        assert_eq!(std::fs::read(files::through(&fd)).expect("read"), b"\x7fELF");
        // A FIFO put in its place: refused at once (no writer would ever come).
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR, 0).expect("mkfifo");
        let e = open_library(&found).expect_err("a FIFO");
        assert!(e.to_string().contains("no longer the file"), "{e}");
        // Another regular file under the name (the first still alive, so a new inode).
        std::fs::remove_file(&path).expect("rm");
        std::fs::write(&path, b"\x7fELF").expect("write");
        assert!(open_library(&found).is_err(), "another inode");
        // Gone.
        std::fs::remove_file(&path).expect("rm");
        assert!(open_library(&found).is_err(), "no file");
        drop(fd);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
