//! Loading gputrace's eBPF object, attaching its programs and owning its maps.
//!
//! Uprobes are attached per library *inode* and for every process (no pid filter): the kernel
//! programs filter on the `TRACED` set, which follows the process tree through the task
//! tracepoints, so children, exec'd workers and libraries loaded later are all covered.

mod tracefs;

use std::collections::BTreeMap;

use aya::{
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    programs::{TracePoint, UProbe},
    Ebpf, EbpfLoader,
};
use gputrace_common::{globals, loss, ProbeSpec, ThreadCounters, PROBES};

use crate::{
    discover::{libraries::Library, symbols},
    error::{Result, TraceError},
};

/// The compiled eBPF object (empty when built with `GPUTRACE_EBPF_STUB`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gputrace"));

/// Whether a probe has a return program (`<symbol>_ret`).
fn has_return(spec: &ProbeSpec) -> bool {
    !matches!(spec.family, gputrace_common::Family::Launch | gputrace_common::Family::GraphLaunch)
}

fn return_program(symbol: &str) -> String {
    format!("{symbol}_ret")
}

/// One library we attached to, and which of our symbols it has.
#[derive(Clone, Debug)]
pub struct AttachedLibrary {
    pub library: Library,
    pub symbols: Vec<&'static str>,
}

/// The loaded programs and their maps. Dropping it detaches everything.
pub struct Kernel {
    ebpf: Ebpf,
    traced: BpfHashMap<MapData, u32, u32>,
    threads: BpfHashMap<MapData, u32, ThreadCounters>,
    loss: PerCpuArray<MapData, u64>,
    attached: BTreeMap<(u64, u64), AttachedLibrary>,
    /// Why process-tree following is degraded, if it is.
    pub task_tracking_error: Option<String>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").field("attached", &self.attached).finish_non_exhaustive()
    }
}

fn map_error(name: &str) -> TraceError {
    TraceError::Map { name: name.to_owned() }
}

impl Kernel {
    /// Load every program (so a verifier problem shows at once, not mid-trace), attach the
    /// task tracepoints, and hand back the ring buffer for the reader.
    pub fn load() -> Result<(Self, RingBuf<MapData>)> {
        if OBJECT.is_empty() {
            return Err(TraceError::NoEbpfObject);
        }
        crate::preflight::check()?;
        let tracefs = tracefs::ensure_mounted();
        let mut loader = EbpfLoader::new();
        let (mut pid_off, mut flags_off) = (8u32, 32u32);
        if let Ok(root) = &tracefs {
            if let Ok(fmt) = tracefs::format(root, "task", "task_newtask") {
                pid_off = tracefs::field_offset(&fmt, "pid").unwrap_or(pid_off);
                flags_off = tracefs::field_offset(&fmt, "clone_flags").unwrap_or(flags_off);
            }
        }
        loader.set_global(globals::NEWTASK_PID_OFFSET, &pid_off, true);
        loader.set_global(globals::NEWTASK_FLAGS_OFFSET, &flags_off, true);
        let mut ebpf = loader.load(OBJECT).map_err(crate::preflight::classify_load_error)?;

        for spec in PROBES {
            load_uprobe(&mut ebpf, spec.symbol)?;
            if has_return(spec) {
                load_uprobe(&mut ebpf, &return_program(spec.symbol))?;
            }
        }

        let task_tracking_error = match tracefs {
            Ok(_) => attach_task_tracepoints(&mut ebpf).err().map(|e| e.to_string()),
            Err(e) => Some(e),
        };
        if let Some(e) = &task_tracking_error {
            log::warn!("child processes will not be followed: {e}");
        }

        let take = |ebpf: &mut Ebpf, name: &str| ebpf.take_map(name).ok_or_else(|| map_error(name));
        let traced = BpfHashMap::try_from(take(&mut ebpf, "TRACED")?).map_err(|_| map_error("TRACED"))?;
        let threads = BpfHashMap::try_from(take(&mut ebpf, "THREADS")?).map_err(|_| map_error("THREADS"))?;
        let loss = PerCpuArray::try_from(take(&mut ebpf, "LOSS")?).map_err(|_| map_error("LOSS"))?;
        let ring = RingBuf::try_from(take(&mut ebpf, "EVENTS")?).map_err(|_| map_error("EVENTS"))?;
        Ok((Self { ebpf, traced, threads, loss, attached: BTreeMap::new(), task_tracking_error }, ring))
    }

    /// Start counting a process (all its threads).
    pub fn trace_process(&mut self, tgid: u32) -> Result<()> {
        self.traced.insert(tgid, 0, 0).map_err(|_| map_error("TRACED"))
    }

    /// Stop counting a process that has exited.
    pub fn untrace_process(&mut self, tgid: u32) {
        let _ = self.traced.remove(&tgid);
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
        let wanted: Vec<&str> = PROBES.iter().map(|p| p.symbol).collect();
        let offsets = symbols::file_offsets(&library.open_path, &wanted)?;
        let mut attached = Vec::new();
        for spec in PROBES {
            let Some(&offset) = offsets.get(spec.symbol) else { continue };
            self.attach_one(spec.symbol, offset, library)?;
            if has_return(spec) {
                self.attach_one(&return_program(spec.symbol), offset, library)?;
            }
            attached.push(spec.symbol);
        }
        log::info!("probed {} of {} CUDA symbols in {}", attached.len(), PROBES.len(), library.name);
        self.attached.insert(key, AttachedLibrary { library: library.clone(), symbols: attached });
        Ok(true)
    }

    fn attach_one(&mut self, program: &str, offset: u64, library: &Library) -> Result<()> {
        let prog: &mut UProbe = self.ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or_else(|| map_error(program))?;
        prog.attach(None, offset, &library.open_path, None).map_err(|source| TraceError::AttachUprobe {
            symbol: program.to_owned(),
            library: library.name.clone().into(),
            source: Box::new(source),
        })?;
        Ok(())
    }

    #[must_use]
    pub fn attached_libraries(&self) -> Vec<AttachedLibrary> {
        self.attached.values().cloned().collect()
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

fn load_uprobe(ebpf: &mut Ebpf, name: &str) -> Result<()> {
    let prog: &mut UProbe = ebpf.program_mut(name).and_then(|p| p.try_into().ok()).ok_or_else(|| map_error(name))?;
    prog.load().map_err(|source| TraceError::LoadProgram { program: name.to_owned(), source: Box::new(source) })
}

fn attach_task_tracepoints(ebpf: &mut Ebpf) -> Result<()> {
    for (program, category, name) in [
        ("task_newtask", "task", "task_newtask"),
        ("sched_process_exec", "sched", "sched_process_exec"),
        ("sched_process_exit", "sched", "sched_process_exit"),
    ] {
        let tp: &mut TracePoint = ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or_else(|| map_error(program))?;
        tp.load().map_err(|source| TraceError::LoadProgram { program: program.to_owned(), source: Box::new(source) })?;
        tp.attach(category, name).map_err(|source| TraceError::AttachTracepoint {
            category: category.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        })?;
    }
    Ok(())
}
