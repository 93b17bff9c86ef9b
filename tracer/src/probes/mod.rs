//! Loading gputrace's eBPF object, attaching its programs and owning its maps.
//!
//! Uprobes are attached per library *inode* and for every process (no pid filter): the kernel
//! programs filter on the `TRACED` set, which follows the process tree through the task
//! tracepoints, so children, exec'd workers and libraries loaded later are all covered.

pub mod btf;
mod detach;
pub mod ebpf_log;
pub mod floor;
pub mod layout;
mod load;
mod read;
pub mod return_safety;
pub mod cpu_sampler;
mod shedding;
mod tracing;
pub mod trap_cost;
pub mod uprobes;

use std::{
    collections::{BTreeMap, BTreeSet},
    os::fd::OwnedFd,
};

use aya::{
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray},
    programs::{
        raw_trace_point::{RawTracePointLink, RawTracePointLinkId},
        RawTracePoint,
    },
    Ebpf, EbpfLoader,
};
use gputrace_common::{
    globals, host::LAYOUT_GLOBAL, ProbeSpec, Shed, SampleKey, SampleStats, ThreadCounters, TrapSamples, ThreadSched, WakeKey, WakeStats, PROBES,
};

use crate::{
    stacks::copied::CopiedStacks,
    discover::{
        files::{open_same_file, Links},
        libraries::Library,
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
    uprobes::multi_links_supported().is_ok()
}


fn return_program(symbol: &str) -> String {
    format!("{symbol}_ret")
}

/// One library we attached to, and which of our symbols it has.
#[derive(Clone, Debug)]
pub struct AttachedLibrary {
    /// The file probed (by device and inode: every process mapping it is covered).
    pub library: Library,
    /// The symbols of `PROBES` it exports that were probed (a refused one is left out).
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
    /// The `PYTHON_READ` map's id: the processes whose Python frames are read.
    python_read_id: Option<u32>,
    /// The `PY_THREADS` map's id: each Python thread's thread state, for the block probe.
    python_threads_id: Option<u32>,
    loss: PerCpuArray<MapData, u64>,
    sched: BpfHashMap<MapData, u32, ThreadSched>,
    preempted_by: aya::maps::HashMap<MapData, u32, u64>,
    wakes: BpfHashMap<MapData, WakeKey, WakeStats>,
    wake_stacks: aya::maps::StackTraceMap<MapData>,
    samples: BpfHashMap<MapData, SampleKey, SampleStats>,
    /// Each traced thread's CPU samples, and those inside a trap (the probes' sampled cost).
    trap_samples: BpfHashMap<MapData, u32, TrapSamples>,
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
    /// Libraries that failed for a lasting reason (`TraceError::lasting`), by (dev, inode):
    /// not parsed and tried again at every rescan or window.
    refused: std::collections::BTreeSet<(u64, u64)>,
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
    tracepoint_links: Vec<(&'static str, RawTracePointLinkId)>,
    /// The tracepoints, being closed since the window ended (`start_detaching_tracepoints`).
    tracepoints_closing: Option<std::thread::JoinHandle<()>>,
    /// Whether the scheduler tracepoints are attached (see `TRACEPOINT_GROUPS`): without them
    /// the report has no on-CPU, run-queue or blocked figures.
    pub sched_traced: bool,
    /// Whether the block tracepoints are attached: without them I/O is not attributed.
    pub io_traced: bool,
    /// Whether wakeups are attributed to their wakers (`sched_waking`).
    pub wakers_traced: bool,
    /// Whether the CPU sampler runs (user stacks on CPU); off-CPU stacks come with
    /// `sched_traced` when stacks are wanted.
    pub cpu_sampled: bool,
    /// Whether the CPU sampler runs at all (also under `--no-stacks`, for the sampled cost).
    sampler_running: bool,
    /// Whether stacks were wanted at all (not `--no-stacks`).
    pub stacks_wanted: bool,
    /// Return probes are off: calls are counted from their entries only.
    pub entry_only: bool,
    /// Copies the eBPF programs' own messages to the log, at -vv (`ebpf_log`); dropped last.
    #[expect(dead_code, reason = "held for its drop, which reads the last messages")]
    ebpf_log: Option<ebpf_log::Reader>,
}

/// The most libraries one session probes. A host runs a few drivers at most (one per
/// container image that ships its own), plus an NCCL and a caching allocator per
/// environment; each costs ~60 uprobes, and without a cap any user could make root attach
/// to file after file by mapping copies (issue 56).
pub const MAX_PROBED_LIBRARIES: usize = 64;

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
/// Where each symbol of [`PROBES`] that the library at `path` exports lies in the file, by
/// symbol. NCCL defines each `ncclX` as a weak alias of `pncclX`: one code, found by either
/// name.
pub(crate) fn probed_offsets(path: &std::path::Path) -> Result<std::collections::HashMap<String, u64>> {
    let nccl = || PROBES.iter().filter(|p| matches!(p.family, gputrace_common::Family::Collective | gputrace_common::Family::Comm));
    let aliased: Vec<String> = nccl().map(|p| format!("p{}", p.symbol)).collect();
    let wanted: Vec<&str> = PROBES.iter().map(|p| p.symbol).chain(aliased.iter().map(String::as_str)).collect();
    let mut found = crate::discover::symbols::file_offsets(path, &wanted)?;
    for p in nccl() {
        if let Some(offset) = found.get(&format!("p{}", p.symbol)).copied() {
            found.entry(p.symbol.to_owned()).or_insert(offset);
        }
    }
    Ok(found)
}

fn hash_map_id(map: &aya::maps::Map) -> Option<u32> {
    match map {
        aya::maps::Map::HashMap(data) => data.info().ok().map(|i| i.id()),
        _ => None,
    }
}


fn take_tracepoint_links(ebpf: &mut Ebpf, links: Vec<(&'static str, RawTracePointLinkId)>) -> Vec<RawTracePointLink> {
    links
        .into_iter()
        .filter_map(|(program, id)| ebpf.program_mut(program).and_then(|p| <&mut RawTracePoint>::try_from(p).ok())?.take_link(id).ok())
        .collect()
}

/// A group of raw tracepoints (each program is named after its tracepoint), attached whole or
/// not at all: what it feeds, said when it is off, and what it reads of the kernel's layout.
#[derive(Clone, Copy, Debug)]
struct TracepointGroup {
    tracepoints: &'static [&'static str],
    without: &'static str,
    needs: layout::Needs,
}

/// Task following, then `ProbeSet::{sched_traced, io_traced}`, wakers and late block
/// requests: a group that fails only degrades what it feeds (with a note), never the CUDA
/// tracing. Raw tracepoints: they need neither tracefs nor its record formats, and close at
/// once where a perf-event tracepoint's close waits out two grace periods under the kernel's
/// event mutex (11 took 415 ms to close here, the same 11 raw ones 4 ms: issue 63).
const TRACEPOINT_GROUPS: [TracepointGroup; 5] = [
    TracepointGroup {
        tracepoints: &["task_newtask", "sched_process_exec", "sched_process_exit"],
        without: "child processes are not followed",
        needs: layout::Needs::Tasks,
    },
    TracepointGroup {
        tracepoints: &["sched_switch", "sched_wakeup", "sched_wakeup_new"],
        without: "scheduler figures (on-CPU, run-queue, blocked, sleeping) are unavailable",
        needs: layout::Needs::Scheduler,
    },
    TracepointGroup {
        tracepoints: &["block_rq_insert", "block_rq_issue", "block_rq_complete"],
        without: "block I/O is not attributed",
        needs: layout::Needs::Requests,
    },
    TracepointGroup { tracepoints: &["sched_waking"], without: "off-CPU time is not split by who woke the threads", needs: layout::Needs::Tasks },
    // Kernels before 6.5 lack it; insert and issue still see most requests.
    TracepointGroup {
        tracepoints: &["block_io_start"],
        without: "block requests issued later by a kernel worker are not attributed",
        needs: layout::Needs::Requests,
    },
];

/// Attach each of `groups` that the kernel's layout lets its programs read; which ones are
/// on, in order. A group left off leaves a note.
fn attach_tracepoint_groups(
    ebpf: &mut Ebpf,
    groups: &[TracepointGroup],
    kernel: std::result::Result<&layout::KernelLayout, &str>,
    links: &mut Vec<(&'static str, RawTracePointLinkId)>,
    notes: &mut Vec<String>,
) -> [bool; TRACEPOINT_GROUPS.len()] {
    let mut attached = [false; TRACEPOINT_GROUPS.len()];
    for (ok, group) in attached.iter_mut().zip(groups.iter().copied()) {
        let result = match kernel {
            Ok(k) => match k.unreadable(group.tracepoints, group.needs) {
                Some(why) => Err(why),
                None => attach_tracepoints(ebpf, group.tracepoints, links).map_err(|e| e.to_string()),
            },
            Err(e) => Err(e.to_owned()),
        };
        match result {
            Ok(()) => *ok = true,
            Err(e) => {
                log::warn!("{}: {e}", group.without);
                // The report keeps the first line; the verifier log went to stderr.
                let first = e.lines().next().unwrap_or_default();
                notes.push(format!("{}: {}", group.without, first.chars().take(300).collect::<String>()));
            }
        }
    }
    attached
}

/// Attach a group whole or not at all: on a failure, what it attached is detached again.
fn attach_tracepoints(ebpf: &mut Ebpf, tracepoints: &[&'static str], links: &mut Vec<(&'static str, RawTracePointLinkId)>) -> Result<()> {
    let mark = links.len();
    let all = attach_each_tracepoint(ebpf, tracepoints, links);
    if all.is_err() {
        uprobes::drop_all(take_tracepoint_links(ebpf, links.split_off(mark)));
    }
    all
}

fn attach_each_tracepoint(ebpf: &mut Ebpf, tracepoints: &[&'static str], links: &mut Vec<(&'static str, RawTracePointLinkId)>) -> Result<()> {
    for &name in tracepoints {
        let tp: &mut RawTracePoint = ebpf.program_mut(name).and_then(|p| p.try_into().ok()).ok_or_else(|| TraceError::Program { name: name.to_owned() })?;
        tp.load().map_err(|source| TraceError::LoadProgram { program: name.to_owned(), source: Box::new(source) })?;
        let link = tp.attach(name).map_err(|source| TraceError::AttachTracepoint { name: name.to_owned(), source: Box::new(source) })?;
        links.push((name, link));
    }
    Ok(())
}

/// The running kernel's layout for the raw tracepoints, from its BTF; why there is none
/// otherwise (every tracepoint group is then off, with that reason).
fn kernel_layout() -> std::result::Result<layout::KernelLayout, String> {
    match btf::Btf::kernel() {
        Ok(Ok(btf)) => Ok(layout::read(&btf)),
        Ok(Err(e)) => Err(format!("the kernel's BTF (/sys/kernel/btf/vmlinux) could not be read: {e}")),
        Err(e) => Err(format!("the kernel publishes no BTF (/sys/kernel/btf/vmlinux: {e}); it needs CONFIG_DEBUG_INFO_BTF")),
    }
}

/// What the raw tracepoints could not read with the kernel's BTF, group by group (`doctor`);
/// `None` where the kernel publishes no BTF.
#[must_use]
pub fn tracepoint_gaps() -> Option<Vec<String>> {
    let btf = btf::Btf::kernel().ok()?;
    let gaps = match btf {
        Err(e) => vec![format!("the kernel's BTF could not be read ({e}): every tracepoint is off")],
        Ok(btf) => {
            let kernel = layout::read(&btf);
            TRACEPOINT_GROUPS.iter().filter_map(|g| Some(format!("{}: {}", g.without, kernel.unreadable(g.tracepoints, g.needs)?))).collect()
        }
    };
    Some(gaps)
}

/// Load the eBPF object with its globals set for this kernel and scope: the raw tracepoints'
/// layout read from the kernel's BTF (unknown, and every tracepoint left off, without it).
fn load_configured(scope: Scope, kernel: Option<&layout::KernelLayout>, stacks_wanted: bool, ebpf_log: bool) -> Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    let layout = kernel.map_or(gputrace_common::Layout::UNKNOWN, |k| k.layout);
    loader.override_global(LAYOUT_GLOBAL, &layout, true);
    let trace_all = u32::from(scope == Scope::AllCuda);
    loader.override_global(globals::TRACE_ALL_CUDA, &trace_all, true);
    let sample_stacks = u32::from(stacks_wanted);
    loader.override_global(globals::SAMPLE_STACKS, &sample_stacks, true);
    // The per-call cost benchmark's A/B switch, not a user setting (docs/benchmarks.md).
    let prompt_every_copy = u32::from(std::env::var_os("GPUTRACE_PROMPT_EVERY_COPY").is_some_and(|v| v == "1"));
    loader.override_global(globals::PROMPT_EVERY_COPY, &prompt_every_copy, true);
    ebpf_log::configure(&mut loader, ebpf_log);
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
    use crate::discover::files;

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
