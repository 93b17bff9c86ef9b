//! Taking probes off and putting them back, for the overhead budget's off phases
//! (`session::budget_controller`).
//!
//! What goes at each level: `gputrace_common::Shed`.
//!
//! A call in flight when its probes come off never sees its return: its slot in the thread's
//! counters would keep the thread "inside CUDA". So each time the calls go and each time
//! they come back, the call epoch moves on (`gputrace_common::call_epoch`): slots of an
//! earlier epoch count as free, and while the calls are off no entry takes one. Slots of
//! probes never taken off (allocations, contexts) are not subject to it.

use std::sync::{atomic::Ordering, Arc};

use gputrace_common::{call_epoch, ProbeSpec, Shed, PROBE_SLOTS};

use super::{has_return, map_error, return_program, uprobes, ProbeSet};
use crate::{
    discover::libraries::Library,
    error::{Result, TraceError},
};

/// Where a probe the budget may take off goes, kept so that it can be put back.
#[derive(Clone, Debug)]
pub(super) struct ShedSite {
    pub(super) spec: &'static ProbeSpec,
    pub(super) offset: u64,
    pub(super) library: Library,
}

impl ProbeSet {
    /// Whether probes can be taken off and put back cheaply: multi-uprobe links detach in
    /// about a grace period, off the caller's thread; a perf-event uprobe's detach holds the
    /// kernel's event mutex ~0.1 s each (docs/facts.md).
    #[must_use]
    pub fn can_shed(&self) -> bool {
        self.uprobes.kind() == uprobes::LinkKind::Multi
    }

    /// Take off the probes `level` names that `hot` marks (by probe id: those that fired;
    /// an off phase), entry and return programs alike. A probe that never fires costs the
    /// job nothing and stays: each link taken off and put back costs the job a breakpoint
    /// written into its code, under its memory map's lock. The links are handed back for the
    /// caller to close on a thread of its own; none when something is off already.
    pub fn shed(&mut self, level: Shed, hot: &[bool; PROBE_SLOTS]) -> Vec<uprobes::Detached> {
        if self.shed.is_some() {
            return Vec::new();
        }
        self.shed = Some(level);
        for p in gputrace_common::PROBES {
            let off = level.takes(p) && hot.get(p.id as usize).copied().unwrap_or(false);
            self.off[p.id as usize] = off;
            self.ever_off[p.id as usize] |= off;
        }
        if level == Shed::LaunchesAndCalls {
            if let Err(e) = self.next_call_epoch(true) {
                log::warn!("the call epoch could not be moved on ({e}): calls in flight when their probes came off may read as still inside CUDA");
            }
        }
        let off = self.off;
        let taken = |program: &str| {
            gputrace_common::PROBES
                .iter()
                .any(|p| off[p.id as usize] && (p.symbol == program || (has_return(p) && return_program(p.symbol) == program)))
        };
        self.uprobes.take_programs(&mut self.ebpf, taken)
    }

    /// Take the caching allocator's probes off for good (the overhead budget's first off
    /// phase: they cost traps per tensor, and their view needs every give-back, so they are
    /// not cycled), and probe no allocator found later (entry-only probes: no call slot to
    /// free). The links are handed back for the caller to close.
    pub fn take_allocators_off(&mut self) -> Vec<uprobes::Detached> {
        super::leave_allocators_unprobed();
        let block = |program: &str| gputrace_common::PROBES.iter().any(|p| p.family == gputrace_common::Family::Block && p.symbol == program);
        self.uprobes.take_programs(&mut self.ebpf, block)
    }

    /// Whether the budget has `spec` off now.
    #[must_use]
    pub fn is_off(&self, spec: &ProbeSpec) -> bool {
        self.off.get(spec.id as usize).copied().unwrap_or(false)
    }

    /// The symbols the budget took off at some point (`tracer.sampling.probes`).
    #[must_use]
    pub fn ever_off(&self) -> Vec<&'static str> {
        gputrace_common::PROBES.iter().filter(|p| self.ever_off[p.id as usize]).map(|p| p.symbol).collect()
    }

    /// What is off now.
    #[must_use]
    pub fn shed_now(&self) -> Option<Shed> {
        self.shed
    }

    /// Put back what `shed` took off. A library's path names the process it was first found
    /// in (`/proc/PID/map_files/…`): when that process is gone, the path is found again
    /// through another traced process mapping the same file; a file no traced process maps
    /// any more is left out, with a note. Returns how many probes went back.
    pub fn restore(&mut self) -> usize {
        let Some(level) = self.shed.take() else { return 0 };
        if level == Shed::LaunchesAndCalls {
            if let Err(e) = self.next_call_epoch(false) {
                log::warn!("the call epoch could not be moved on ({e}): calls in flight when their probes came off may read as still inside CUDA");
            }
        }
        let off = std::mem::replace(&mut self.off, [false; PROBE_SLOTS]);
        let mut back = 0;
        for mut site in std::mem::take(&mut self.shed_sites) {
            if off[site.spec.id as usize] {
                let mut attached = self.attach_site(&site);
                if attached.as_ref().is_err_and(TraceError::file_gone) {
                    if let Some(library) = self.mapped_again(&site.library) {
                        site.library = library;
                        attached = self.attach_site(&site);
                    }
                }
                let (symbol, name) = (site.spec.symbol, &site.library.name);
                match attached {
                    Ok(()) => back += 1,
                    Err(e) if e.file_gone() => {
                        log::info!("{e}");
                        self.later_notes.push(format!(
                            "{symbol} in {name} was not put back after the overhead budget took it off: no traced process maps the file any more"
                        ));
                        continue;
                    }
                    Err(e) => {
                        log::warn!("{e}");
                        self.later_notes.push(format!("{symbol} in {name} could not be put back after the overhead budget took it off ({e})"));
                    }
                }
            }
            self.shed_sites.push(site);
        }
        back
    }

    /// Attach one site's programs: the return first, as `attach_library` does.
    fn attach_site(&mut self, site: &ShedSite) -> Result<()> {
        let mark = self.uprobes.mark();
        let mut both = if has_return(site.spec) && !self.entry_only { self.attach_one(&return_program(site.spec.symbol), site.offset, &site.library) } else { Ok(()) };
        if both.is_ok() {
            both = self.attach_one(site.spec.symbol, site.offset, &site.library);
        }
        if both.is_err() {
            self.uprobes.undo_to(&mut self.ebpf, mark);
        }
        both
    }

    /// Move the call epoch on (module docs); `off`: the calls are going off.
    fn next_call_epoch(&mut self, off: bool) -> Result<()> {
        let next = call_epoch::next(self.call_epoch.load(Ordering::Relaxed), off);
        let mut epoch = aya::maps::Array::<_, u32>::try_from(self.ebpf.map_mut("CALL_EPOCH").ok_or_else(|| map_error("CALL_EPOCH"))?)
            .map_err(|_| map_error("CALL_EPOCH"))?;
        epoch.set(0, &next, 0).map_err(|_| map_error("CALL_EPOCH"))?;
        self.call_epoch.store(next, Ordering::Relaxed);
        Ok(())
    }

    /// The call epoch as last written to the kernel, shared with readers of the `THREADS`
    /// map on other threads (the Python sampler tells a thread inside a call with it:
    /// `ThreadCounters::in_call`).
    #[must_use]
    pub fn call_epoch(&self) -> Arc<std::sync::atomic::AtomicU32> {
        Arc::clone(&self.call_epoch)
    }

    /// The same file as `library`, through a traced process that maps it now.
    fn mapped_again(&self, library: &Library) -> Option<Library> {
        let key = (library.dev, library.inode);
        let pids = self.attached.get(&key)?.mapped_by.clone();
        pids.into_iter().find_map(|pid| crate::discover::libraries::mapped_by(pid).into_iter().find(|l| (l.dev, l.inode) == key))
    }

    /// Whether some probe off now has a place to go back to.
    #[must_use]
    pub fn has_off_sites(&self) -> bool {
        self.shed_sites.iter().any(|s| self.is_off(s.spec))
    }
}
