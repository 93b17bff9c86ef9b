//! Python frames of CPython targets, read from outside with py-spy's library in its
//! non-blocking mode: the target is never stopped (no ptrace), so a frame can now and then
//! be torn, which a sampler can live with. Each read is tagged with what the probes say each
//! thread is doing (inside which CUDA call, from `THREADS`), so that `.item()` shows as a
//! sync wait at its line and a `torch.save` as copies at its line.
//!
//! The reads run on a thread of their own, at [`TARGET_HZ`] or slower: a read that takes
//! longer than a fifth of the period stretches the period, so that the tracer's CPU stays
//! bounded whatever the target's stack depth.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use aya::maps::{HashMap as BpfHashMap, Map, MapData};
use gputrace_common::{host::launch_age, Family, PyFramesEvent, PyLayout, PyThreadKey, ThreadCounters, PROBES};
use py_spy::{config::LockingStrategy, Config, PythonSpy};

use super::{
    alloc::{AllocStack, BlockSite},
    python_frames::{self, CodeReader},
    Activity, Frame, LaunchAges, Origin, StackTime, MAX_FRAMES,
};

/// Reads per second when a read is cheap.
pub const TARGET_HZ: u64 = 49;
/// A read may take at most this share of the period (it is the tracer's CPU, not the job's).
const MAX_DUTY: f64 = 0.2;

/// Reads made at once for allocations, at most this many a second (the rest keep their native
/// stacks): a job that allocates thousands of times a second is churning, and its sites are
/// a sample of them.
const ALLOC_READS_PER_S: u32 = 100;

/// An allocation is read only this soon after its call. The session drains allocations at
/// once; the median lag on the 2-core CI machine is 0.2 ms, but a busy reader queues asks for
/// milliseconds, and by then the thread has left the allocating line (`tests/fake-cuda/leak.py`
/// spends 3 ms in the line after its allocation: a late read names the caller instead).
const ALLOC_READ_MAX_LAG_NS: u64 = 2_000_000;

/// What the session asks of the reader thread.
#[derive(Clone, Debug)]
enum Ask {
    /// Read this process from now on.
    Follow(u32),
    /// A thread of a followed process just made a device allocation: read its line now.
    Alloc { pid: u32, tid: u32, bytes: u64, failed: bool, at_ns: u64, block: Option<u64> },
    /// A block's frames, read in the probe: make them into lines.
    Frames(Box<PyFramesEvent>),
}

/// What the reader thread shares with the session.
#[derive(Debug, Default)]
struct Shared {
    stacks: HashMap<(u32, Activity, bool, Vec<Frame>), StackTime>,
    allocs: HashMap<(u32, Vec<Frame>), AllocStack>,
    notes: Vec<String>,
    reads: u64,
    busy: Duration,
    /// Driver allocations not read: the reader came later than `ALLOC_READ_MAX_LAG_NS`.
    stale_allocs: u64,
    /// Driver allocations read in time.
    alloc_reads: u64,
    /// Caching-allocator blocks read, by process and address: when the block was handed out
    /// (which block at that address it was) and its line.
    block_reads: HashMap<(u32, u64), (u64, Vec<Frame>)>,
    /// Records of frames read in the probe, and those of them with no frame that checked out
    /// (by process: a process whose records all fail has a layout that does not fit it).
    probe_frames: HashMap<u32, (u64, u64)>,
}

/// The Python sampler: started once, fed the processes to read as they show CUDA.
#[derive(Debug)]
pub struct PythonSampler {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    add: mpsc::Sender<Ask>,
    handle: Option<JoinHandle<()>>,
}

/// Counts of the sampler's own work, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Work {
    /// Passes the reader thread made: each periodic read of every process, and each allocation
    /// read.
    pub reads: u64,
    /// Wall time the reader thread spent reading, all passes together.
    pub busy: Duration,
}

impl PythonSampler {
    /// Start the reader thread. `threads_map` is the kernel's `THREADS` map id (the thread
    /// opens its own handle, to read which call each thread is in), `python_read_map` that of
    /// `PYTHON_READ` (where it lists the processes it reads, whose allocations then wake the
    /// session at once), `python_threads_map` that of `PY_THREADS` (where it puts each Python
    /// thread's state for the block probe), `call_epoch` the call epoch its entries are read against
    /// (`ThreadCounters::in_call`).
    #[must_use]
    pub fn start(threads_map: Option<u32>, python_read_map: Option<u32>, python_threads_map: Option<u32>, call_epoch: Arc<std::sync::atomic::AtomicU32>) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (add, added) = mpsc::channel();
        let handle = {
            let (shared, stop) = (Arc::clone(&shared), Arc::clone(&stop));
            std::thread::Builder::new().name("gputrace-py".into()).spawn(move || run(&shared, &stop, &added, Maps { threads: threads_map, python_read: python_read_map, python_threads: python_threads_map }, &call_epoch)).ok()
        };
        Self { shared, stop, add, handle }
    }

    /// Read this process's Python frames too (a no-op with a note if it is not CPython).
    pub fn follow(&self, pid: u32) {
        let _ = self.add.send(Ask::Follow(pid));
    }

    /// Charge a caching allocator's block to the Python frames the probe read as it was handed
    /// out (a no-op for a process not followed).
    pub fn probe_frames(&self, frames: PyFramesEvent) {
        let _ = self.add.send(Ask::Frames(Box::new(frames)));
    }

    /// Charge a device allocation of thread `tid` at `at_ns` to the Python line it is at now
    /// (a no-op for a process not followed, or not Python). `block`: a caching allocator's
    /// block at that address, rather than a driver allocation.
    pub fn allocated(&self, pid: u32, tid: u32, bytes: u64, failed: bool, at_ns: u64, block: Option<u64>) {
        let _ = self.add.send(Ask::Alloc { pid, tid, bytes, failed, at_ns, block });
    }

    /// The blocks of `live` (process, address, allocated at, bytes) allocated before
    /// `made_before` whose Python line was read, summed by process and line; the reads of
    /// blocks no longer live are forgotten.
    #[must_use]
    pub fn block_sites(&self, live: &[(u32, u64, u64, u64)], made_before: u64) -> Vec<BlockSite> {
        let Ok(mut sh) = self.shared.lock() else { return Vec::new() };
        let now_live: std::collections::HashSet<(u32, u64, u64)> = live.iter().map(|&(pid, addr, at, _)| (pid, addr, at)).collect();
        sh.block_reads.retain(|&(pid, addr), (at, _)| now_live.contains(&(pid, addr, *at)));
        let mut by_line: HashMap<(u32, &[Frame]), BlockSite> = HashMap::new();
        for &(pid, addr, at_ns, bytes) in live.iter().filter(|b| b.2 < made_before) {
            // The read of this very block: the address is handed out again after a free.
            let Some((_, frames)) = sh.block_reads.get(&(pid, addr)).filter(|(read_at, _)| *read_at == at_ns) else { continue };
            let site = by_line.entry((pid, frames.as_slice())).or_insert_with(|| BlockSite { pid, frames: frames.clone(), ..BlockSite::default() });
            site.live_blocks += 1;
            site.live_bytes = site.live_bytes.saturating_add(bytes);
        }
        by_line.into_values().collect()
    }

    /// The allocations charged to Python lines so far, cumulative.
    #[must_use]
    pub fn alloc_stacks(&self) -> Vec<AllocStack> {
        self.shared.lock().map(|s| s.allocs.values().cloned().collect()).unwrap_or_default()
    }

    /// The stacks read so far, cumulative.
    #[must_use]
    pub fn stacks(&self) -> Vec<StackTime> {
        self.shared.lock().map(|s| s.stacks.values().cloned().collect()).unwrap_or_default()
    }

    /// Notes for the report (processes that could not be read, and why).
    #[must_use]
    pub fn notes(&self) -> Vec<String> {
        self.shared
            .lock()
            .map(|s| {
                let mut notes = s.notes.clone();
                for (pid, &(records, failed)) in &s.probe_frames {
                    if failed * 2 > records {
                        notes.push(format!(
                            "{failed} of {records} Python stacks read in the probes of process {pid} did not check out (its interpreter's layout is not the one expected): its tensors' lines are partly missing"
                        ));
                    }
                }
                // A few late reads are the sampler's normal loss; most of them is worth saying.
                if s.stale_allocs > s.alloc_reads {
                    notes.push(format!(
                        "{} of {} device allocations were not charged to a Python line: the reader came more than {} ms after the call (it was busy); they keep their native stacks",
                        s.stale_allocs,
                        s.stale_allocs + s.alloc_reads,
                        ALLOC_READ_MAX_LAG_NS / 1_000_000
                    ));
                }
                notes
            })
            .unwrap_or_default()
    }

    /// What the reader thread has done so far.
    #[must_use]
    pub fn work(&self) -> Work {
        self.shared.lock().map(|s| Work { reads: s.reads, busy: s.busy }).unwrap_or_default()
    }
}

impl Drop for PythonSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One process being read.
struct Spied {
    pid: u32,
    spy: PythonSpy,
    /// Its code objects, where the probes read its frames (its version has a layout).
    code: Option<CodeReader>,
    /// Where the probes read its frames.
    layout: PyLayout,
    /// Its threads whose states are in `PY_THREADS`, and when they were last listed.
    threads: Vec<u32>,
    threads_listed: Option<Instant>,
    /// Its start time (clock ticks since boot) when it was opened: py-spy and
    /// `/proc/PID/mem` name it by pid, and a pid reused by another process would be read as
    /// this one (see [`same_process`]).
    born: u64,
}

/// `PYTHON_READ`: each process read, and where the probes find its frames.
type LayoutMap = BpfHashMap<MapData, u32, PyLayout>;
/// `PY_THREADS`: each Python thread's thread state.
type ThreadStateMap = BpfHashMap<MapData, PyThreadKey, u64>;

/// The kernel's maps the reader thread opens by id.
#[derive(Clone, Copy, Debug)]
struct Maps {
    threads: Option<u32>,
    python_read: Option<u32>,
    python_threads: Option<u32>,
}

/// A Python process's thread list is read again this often for `PY_THREADS` (a thread
/// started meanwhile has its blocks charged to the main thread's line until then).
const THREADS_EVERY: Duration = Duration::from_millis(200);

/// Put the thread states of `s` in `PY_THREADS`, if due: the new ones added, the gone ones
/// taken out.
fn list_threads(s: &mut Spied, map: Option<&mut ThreadStateMap>) {
    let (Some(map), Some(code)) = (map, s.code.as_ref()) else { return };
    if s.threads_listed.is_some_and(|at| at.elapsed() < THREADS_EVERY) {
        return;
    }
    s.threads_listed = Some(Instant::now());
    let now = code.threads(&s.layout);
    let (gone, entries) = thread_changes(s.pid, &s.threads, &now);
    for key in &gone {
        let _ = map.remove(key);
    }
    for (key, state) in &entries {
        let _ = map.insert(key, state, 0);
    }
    s.threads = now.into_iter().map(|(tid, _)| tid).collect();
}

/// What `PY_THREADS` gets from process `pid`'s thread list: the keys of its threads listed
/// `before` and gone `now`, and its entries now. Every key holds `pid` (the kernel's), so a
/// thread id read from the process's memory can only name one of its own entries.
fn thread_changes(pid: u32, before: &[u32], now: &[(u32, u64)]) -> (Vec<PyThreadKey>, Vec<(PyThreadKey, u64)>) {
    let gone = before.iter().filter(|t| !now.iter().any(|(tid, _)| tid == *t)).map(|&tid| PyThreadKey { tgid: pid, tid }).collect();
    let entries = now.iter().map(|&(tid, state)| (PyThreadKey { tgid: pid, tid }, state)).collect();
    (gone, entries)
}

fn run(shared: &Mutex<Shared>, stop: &AtomicBool, asked: &mpsc::Receiver<Ask>, maps: Maps, call_epoch: &std::sync::atomic::AtomicU32) {
    let threads = maps.threads.and_then(|id| MapData::from_id(id).ok()).and_then(|m| BpfHashMap::<MapData, u32, ThreadCounters>::try_from(Map::HashMap(m)).ok());
    let mut python_threads = maps.python_threads.and_then(|id| MapData::from_id(id).ok()).and_then(|m| ThreadStateMap::try_from(Map::HashMap(m)).ok());
    let mut python_read = maps.python_read.and_then(|id| MapData::from_id(id).ok()).and_then(|m| LayoutMap::try_from(Map::HashMap(m)).ok());
    let mut spied: Vec<Spied> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let period = Duration::from_nanos(1_000_000_000 / TARGET_HZ);
    let mut last = Instant::now();
    let mut alloc_reads: AllocReads = (Instant::now(), 0, 0, 0);
    // Until the traced tree first gives the GPU work, frames are not kept: the job is still importing
    // and setting up (seconds under `run`, `import torch` alone), and those frames would
    // take the shares of the sites of a diagnosis about the training.
    let mut launched = threads.is_none();
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let weight = began.duration_since(last);
        last = began;
        launched = launched || threads.as_ref().is_some_and(any_launch);
        spied.retain_mut(|s| {
            list_threads(s, python_threads.as_mut());
            let kept = if launched { read(s, weight, threads.as_ref(), call_epoch.load(Ordering::Relaxed), shared) } else { same_process(s.pid, s.born) };
            if !kept {
                if let Some(m) = python_read.as_mut() {
                    let _ = m.remove(&s.pid);
                }
                if let Some(m) = python_threads.as_mut() {
                    for &tid in &s.threads {
                        let _ = m.remove(&PyThreadKey { tgid: s.pid, tid });
                    }
                }
            }
            kept
        });
        let took = began.elapsed();
        if let Ok(mut sh) = shared.lock() {
            sh.reads += 1;
            sh.busy += took;
        }
        // Waiting on the session's asks is the sleep: an allocation is read as it comes.
        let until = began + period.max(took.div_f64(MAX_DUTY));
        while let Some(wait) = until.checked_duration_since(Instant::now()) {
            let first = match asked.recv_timeout(wait) {
                Ok(ask) => ask,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(wait);
                    break;
                }
            };
            // Everything asked meanwhile, the blocks last: a block's read takes a millisecond
            // or two of a PyTorch process, and a driver allocation queued behind a few of them
            // went stale (13 of 19 on the H200's fragmentation job under --tensors).
            let mut batch: Vec<Ask> = std::iter::once(first).chain(asked.try_iter()).collect();
            batch.sort_by_key(|a| matches!(a, Ask::Alloc { block: Some(_), .. }));
            for ask in batch {
                answer(ask, &mut spied, &mut seen, &mut alloc_reads, (python_read.as_mut(), python_threads.as_mut()), shared);
            }
        }
    }
}

/// Reads of allocations this second: since when, driver successes, failures, blocks.
type AllocReads = (Instant, u32, u32, u32);

/// Do what the session asked: follow a process, or read an allocation's line.
fn answer(
    ask: Ask,
    spied: &mut Vec<Spied>,
    seen: &mut std::collections::BTreeSet<u32>,
    alloc_reads: &mut AllocReads,
    (python_read, python_threads): (Option<&mut LayoutMap>, Option<&mut ThreadStateMap>),
    shared: &Mutex<Shared>,
) {
    match ask {
        Ask::Follow(pid) => {
            if seen.insert(pid) {
                let Some(born) = crate::discover::process::stat(pid).map(|st| st.start_ticks) else { return };
                match open(pid) {
                    Ok(spy) => {
                        let (layout, code) = probe_layout(pid, &spy);
                        // Opened by pid: it must still be the process first seen, not one
                        // that took its pid meanwhile.
                        if !same_process(pid, born) {
                            return;
                        }
                        // The probes read its frames only once its code can be read here.
                        let layout = if code.is_some() { layout } else { PyLayout::default() };
                        let mut s = Spied { pid, spy, code, layout, threads: Vec::new(), threads_listed: None, born };
                        // Its threads first: the probe reads frames from the layout on.
                        list_threads(&mut s, python_threads);
                        spied.push(s);
                        if let Some(m) = python_read {
                            let _ = m.insert(&pid, &layout, 0);
                        }
                    }
                    Err(Some(why)) => note(shared, why),
                    Err(None) => {}
                }
            }
        }
        Ask::Frames(event) => {
            let (pid, addr, at_ns) = (event.header.tgid, event.block, event.header.ts_ns);
            let Some(reader) = spied.iter_mut().find(|s| s.pid == pid).and_then(|s| s.code.as_mut()) else { return };
            let began = Instant::now();
            let frames: Vec<Frame> = reader.frames(&event).into_iter().take(MAX_FRAMES).collect();
            let Ok(mut sh) = shared.lock() else { return };
            sh.busy += began.elapsed();
            let counts = sh.probe_frames.entry(pid).or_default();
            counts.0 += 1;
            if frames.is_empty() {
                counts.1 += 1;
            } else if sh.block_reads.len() < MAX_BLOCK_READS || sh.block_reads.contains_key(&(pid, addr)) {
                sh.block_reads.insert((pid, addr), (at_ns, frames));
            }
        }
        Ask::Alloc { pid, tid, bytes, failed, at_ns, block } => {
            // A process whose blocks' frames the probes read is never read late for one.
            if block.is_some() && spied.iter().any(|s| s.pid == pid && s.code.is_some()) {
                return;
            }
            // A read long after the call finds the thread elsewhere: no line beats a wrong one
            // (the allocation keeps its native stack).
            let lag = crate::clock::monotonic_ns().saturating_sub(at_ns);
            if lag > ALLOC_READ_MAX_LAG_NS {
                // Blocks are late by design (most wait for the ring's batch): only the
                // driver's allocations, each prompt, are worth a note.
                if block.is_none() && spied.iter().any(|s| s.pid == pid) {
                    if let Ok(mut sh) = shared.lock() {
                        sh.stale_allocs += 1;
                    }
                }
                return;
            }
            if alloc_reads.0.elapsed() >= Duration::from_secs(1) {
                *alloc_reads = (Instant::now(), 0, 0, 0);
            }
            // Failures have a budget of their own: an out-of-memory diagnosis is about them
            // alone, and successes must not crowd them out; blocks, which come at a tensor's
            // rate, have theirs, so as not to crowd out the driver's.
            let used = if block.is_some() {
                &mut alloc_reads.3
            } else if failed {
                &mut alloc_reads.2
            } else {
                &mut alloc_reads.1
            };
            if *used >= ALLOC_READS_PER_S {
                return;
            }
            let Some(s) = spied.iter_mut().find(|s| s.pid == pid) else { return };
            *used += 1;
            let began = Instant::now();
            match block {
                Some(addr) => read_block(s, tid, addr, at_ns, shared),
                None => read_allocation(s, tid, bytes, failed, shared),
            }
            // The tracer's own cost, reported with the periodic reads'.
            if let Ok(mut sh) = shared.lock() {
                sh.alloc_reads += u64::from(block.is_none());
                sh.reads += 1;
                sh.busy += began.elapsed();
            }
        }
    }
}

/// Where the probes find process `pid`'s Python frames, and the reader of its code objects;
/// the default layout (none) for a version without one, or with `GPUTRACE_PY_FRAMES=off`
/// (the reads from outside only, as before them: for A/B measurements).
fn probe_layout(pid: u32, spy: &PythonSpy) -> (PyLayout, Option<CodeReader>) {
    if std::env::var_os("GPUTRACE_PY_FRAMES").is_some_and(|v| v == "off") {
        return (PyLayout::default(), None);
    }
    let v = &spy.version;
    let Some((layout, code)) = python_frames::layout(v.major, v.minor, spy.addresses.interpreter_address as u64) else {
        log::debug!("process {pid}: Python {}.{} has no frame layout here; its lines are read from outside", v.major, v.minor);
        return (PyLayout::default(), None);
    };
    // Tests of short jobs read every block's frames: a sample of a few hundred blocks could
    // miss the one they look for.
    let one_in = std::env::var("GPUTRACE_PY_FRAMES_ONE_IN").ok().and_then(|n| n.parse::<u32>().ok()).map_or(layout.capture_one_in, |n| n.max(1));
    (PyLayout { capture_one_in: one_in, ..layout }, CodeReader::open(pid, code))
}

/// Whether any traced thread has given the GPU work: launched a kernel or a graph, copied,
/// set memory or waited for it (a job of copies alone launches nothing). Setting up a
/// context and allocating are the setup's.
fn any_launch(threads: &BpfHashMap<MapData, u32, ThreadCounters>) -> bool {
    let work = |f: Family| matches!(f, Family::Launch | Family::GraphLaunch | Family::Copy | Family::Memset | Family::Sync);
    let launch = |c: &ThreadCounters| PROBES.iter().filter(|p| work(p.family)).any(|p| c.hits.get(p.id as usize).is_some_and(|&h| h > 0));
    threads.iter().filter_map(Result::ok).any(|(_, c)| launch(&c))
}

/// Blocks whose lines are kept at most (a job that churns through ever new addresses: the
/// newest reads are dropped, and their blocks go uncharged).
const MAX_BLOCK_READS: usize = 1 << 18;

/// Read the Python frames of thread `tid` now and keep them for the block at `addr`.
fn read_block(s: &mut Spied, tid: u32, addr: u64, at_ns: u64, shared: &Mutex<Shared>) {
    let Some(frames) = frames_of(s, tid) else { return };
    let Ok(mut sh) = shared.lock() else { return };
    let pid = s.pid;
    if sh.block_reads.len() < MAX_BLOCK_READS || sh.block_reads.contains_key(&(pid, addr)) {
        sh.block_reads.insert((pid, addr), (at_ns, frames));
    }
}

/// The Python frames of thread `tid` now: of the main thread where `tid` has none.
fn frames_of(s: &mut Spied, tid: u32) -> Option<Vec<Frame>> {
    let traces = s.spy.get_stack_traces().ok()?;
    let with_frames = |t: &&py_spy::StackTrace| !t.frames.is_empty();
    // A thread with no Python frames (autograd's engine running a backward pass) works for
    // the Python call that waits on it: charge the main thread's line.
    let trace = traces
        .iter()
        .filter(with_frames)
        .find(|t| t.os_thread_id.is_some_and(|t| t as u32 == tid))
        .or_else(|| traces.iter().filter(with_frames).find(|t| t.os_thread_id.is_some_and(|t| t as u32 == s.pid)))?;
    Some(python_frames(trace))
}

/// Read the Python frames of thread `tid` now and charge an allocation to them.
fn read_allocation(s: &mut Spied, tid: u32, bytes: u64, failed: bool, shared: &Mutex<Shared>) {
    let Some(frames) = frames_of(s, tid) else { return };
    let Ok(mut sh) = shared.lock() else { return };
    let entry = sh.allocs.entry((tid, frames.clone())).or_insert_with(|| AllocStack { pid: s.pid, tid, origin: Origin::Python, frames, ..AllocStack::default() });
    if failed {
        entry.failed += 1;
        entry.failed_bytes = entry.failed_bytes.saturating_add(bytes);
    } else {
        entry.count += 1;
        entry.bytes = entry.bytes.saturating_add(bytes);
    }
}

fn python_frames(trace: &py_spy::StackTrace) -> Vec<Frame> {
    trace
        .frames
        .iter()
        .take(MAX_FRAMES)
        .map(|f| Frame { function: f.name.clone(), file: Some(f.filename.clone()), line: u32::try_from(f.line).ok().filter(|&l| l > 0), module: None })
        .collect()
}

fn note(shared: &Mutex<Shared>, why: String) {
    log::info!("{why}");
    if let Ok(mut s) = shared.lock() {
        s.notes.push(why);
    }
}

/// Whether `pid` still names the process that started at `born` (clock ticks since boot): a
/// pid freed by an exit is given to the next process, and what is read by pid would then be
/// a stranger's memory.
fn same_process(pid: u32, born: u64) -> bool {
    crate::discover::process::stat(pid).is_some_and(|st| st.start_ticks == born && st.state != 'Z' && st.state != 'X')
}

/// Open a process for reading; `Err(None)` when it simply is not a Python process.
fn open(pid: u32) -> Result<PythonSpy, Option<String>> {
    let config = Config { blocking: LockingStrategy::NonBlocking, native: false, ..Config::default() };
    let looks_python = looks_like_python(pid);
    PythonSpy::new(pid as py_spy::Pid, &config).map_err(|e| {
        looks_python.then(|| {
            format!("process {pid} looks like Python but its frames cannot be read ({e}): its sites show native frames only")
        })
    })
}

/// A process running a CPython interpreter: its executable or a mapped library is named so.
fn looks_like_python(pid: u32) -> bool {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let maps = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")).unwrap_or_default();
    exe.rsplit('/').next().is_some_and(|n| n.starts_with("python")) || maps.contains("libpython")
}

/// One read of a process; false once the process is gone.
fn read(s: &mut Spied, weight: Duration, threads: Option<&BpfHashMap<MapData, u32, ThreadCounters>>, epoch: u32, shared: &Mutex<Shared>) -> bool {
    // A torn read (the interpreter moved under us) is skipped; a process gone ends it, and so
    // does its pid now naming another process (what was read may be that one's).
    let traces = s.spy.get_stack_traces();
    if !same_process(s.pid, s.born) {
        return false;
    }
    let Ok(traces) = traces else { return true };
    let Ok(mut sh) = shared.lock() else { return false };
    for trace in traces {
        let Some(tid) = trace.os_thread_id.map(|t| t as u32) else { continue };
        if trace.frames.is_empty() {
            continue;
        }
        let counters = threads.and_then(|m| m.get(&tid, 0).ok());
        let activity = counters.map_or(Activity::Host, |c| if c.in_call(epoch) { Activity::of_probe(u32::from(c.call_probe)) } else { Activity::Host });
        // Host code on a CPU: how long since the thread last launched, as the kernel's sampler
        // tags its native samples (`launch_age`), read now rather than when py-spy read the
        // frames a moment ago.
        let age = match counters {
            Some(c) if activity == Activity::Host && trace.active && c.last_launch_ns != 0 => {
                launch_age::of(crate::clock::monotonic_ns().saturating_sub(c.last_launch_ns))
            }
            _ => launch_age::UNKNOWN,
        };
        let frames = python_frames(&trace);
        let key = (tid, activity, trace.active, frames);
        let entry = sh.stacks.entry(key.clone()).or_insert_with(|| StackTime {
            tid,
            pid: s.pid,
            activity,
            on_cpu: trace.active,
            origin: Origin::Python,
            frames: key.3,
            count: 0,
            ns: 0,
            launch_ages: LaunchAges::default(),
        });
        entry.count += 1;
        entry.ns += weight.as_nanos() as u64;
        entry.launch_ages.add(age, 1);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_names_the_same_process_only_with_its_start_time() {
        let me = std::process::id();
        let born = crate::discover::process::stat(me).expect("own stat").start_ticks;
        assert!(same_process(me, born));
        assert!(!same_process(me, born + 1), "another process that took the pid");
        assert!(!same_process(u32::MAX, born), "no such pid");
    }

    #[test]
    fn one_process_cannot_overwrite_anothers_thread_states() {
        // Process 20 writes thread 7's id into its own thread list, as any process may; the
        // job, process 10, has a real thread 7.
        let mut map = std::collections::HashMap::new();
        for (pid, state) in [(10, 0xaaaa), (20, 0xbbbb)] {
            let (_, entries) = thread_changes(pid, &[], &[(7, state)]);
            map.extend(entries);
        }
        assert_eq!(map.get(&PyThreadKey { tgid: 10, tid: 7 }), Some(&0xaaaa));
        assert_eq!(map.get(&PyThreadKey { tgid: 20, tid: 7 }), Some(&0xbbbb));
        // Its thread 7 gone from its list, process 20 takes out only its own entry.
        let (gone, _) = thread_changes(20, &[7], &[]);
        assert_eq!(gone, [PyThreadKey { tgid: 20, tid: 7 }]);
        for key in &gone {
            map.remove(key);
        }
        assert_eq!(map.get(&PyThreadKey { tgid: 10, tid: 7 }), Some(&0xaaaa));
        // The kernel's key: two u32s, no padding, tgid first.
        assert_eq!(std::mem::size_of::<PyThreadKey>(), 8);
        assert_eq!(std::mem::offset_of!(PyThreadKey, tid), 4);
    }
}
