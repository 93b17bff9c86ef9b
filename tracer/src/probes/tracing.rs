//! What is traced: the processes in the `TRACED` set, and the uprobes attached to each CUDA
//! library's inode as it is found.

use super::{AttachedLibrary, ProbeSet, has_return, map_error, open_library, probed_offsets, return_program, shedding, trap_cost, uprobes};
use crate::discover::files;
use crate::discover::libraries::Library;
use crate::discover::symbols;
use crate::discover::trust;
use crate::error::Result;
use crate::error::TraceError;
use gputrace_common::ALLOCATOR_SYMBOLS;
use gputrace_common::PROBES;
use gputrace_common::Shed;
use gputrace_common::ThreadSched;
use std::collections::BTreeMap;
use std::collections::HashMap;

impl ProbeSet {
    /// Start counting a process (all its threads).
    pub fn trace_process(&mut self, tgid: u32) -> Result<()> {
        self.traced.insert(&tgid, &0, 0).map_err(|_| map_error("TRACED"))
    }

    /// Start the scheduler clock of a thread that exists already, in the state `/proc` shows
    /// (a thread that runs until it exits would otherwise never be seen switching).
    pub fn seed_thread(&mut self, tid: u32, process: u32, state: u32, now_ns: u64) {
        let s = ThreadSched { tgid: process, state, since_ns: now_ns, ..ThreadSched::default() };
        // NOEXIST: a switch seen meanwhile knows better.
        let _ = self.sched.insert(&tid, &s, 1);
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
    /// A library refused for a lasting reason before is not tried again: see
    /// [`ProbeSet::was_refused`].
    pub fn attach_library(&mut self, library: &Library) -> Result<bool> {
        let key = (library.dev, library.inode);
        if self.attached.contains_key(&key) {
            return Ok(false);
        }
        let attached = self.try_attach_library(library);
        if attached.as_ref().is_err_and(TraceError::lasting) {
            self.refused.insert(key);
        }
        attached
    }

    /// Whether the library failed for a lasting reason (a file not trusted, too large, not
    /// an ELF, over the session's cap): callers that look again at every rescan or window
    /// skip it rather than parse it again.
    #[must_use]
    pub fn was_refused(&self, library: &Library) -> bool {
        self.refused.contains(&(library.dev, library.inode))
    }

    fn try_attach_library(&mut self, library: &Library) -> Result<bool> {
        let key = (library.dev, library.inode);
        if self.attached.len() >= super::MAX_PROBED_LIBRARIES {
            return Err(TraceError::TooManyLibraries { library: library.name.clone().into(), limit: super::MAX_PROBED_LIBRARIES });
        }
        // Read and probed through one descriptor of the very file found: a path checked
        // and then used again could name another file by then (its directory may be the
        // job owner's), and root would read or probe that one.
        let file = open_library(library)?;
        // Whose it is and how large, from that same descriptor, before a byte is parsed.
        let status = rustix::fs::fstat(&file).map_err(|e| TraceError::io("reading the owner of", &library.name, e.into()))?;
        trust::check(std::path::Path::new(&library.name), status.st_uid, u64::try_from(status.st_size).unwrap_or(0), trust::invoking_uid())?;
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
            probed_offsets(&library.open_path).map_err(|e| e.naming(&library.name))?
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

    pub(super) fn attach_one(&mut self, program: &str, offset: u64, library: &Library) -> Result<()> {
        self.uprobes.attach(&mut self.ebpf, program, offset, &library.open_path).map_err(|source| TraceError::AttachUprobe {
            symbol: program.to_owned(),
            library: library.name.clone().into(),
            source: Box::new(source),
        })
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

    /// Every library probed so far and what of it: the report names them, and the overhead
    /// estimate prices each probe by the instruction it traps on.
    #[must_use]
    pub fn attached_libraries(&self) -> Vec<AttachedLibrary> {
        self.attached.values().cloned().collect()
    }
}
