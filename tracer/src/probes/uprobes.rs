//! Every uprobe gputrace attaches, whichever way the kernel allows: multi-uprobe links where
//! it has them (fast to detach), else perf-event uprobes. Both are aya's: the eBPF object
//! carries each uprobe program twice, once in a `uprobe` section and once in a
//! `uprobe.multi` one (named `<program>_multi`), because the kernel takes a multi-uprobe
//! link only for a program loaded with that attach type, and a perf-event uprobe only for
//! one loaded without it. Only the copy of the chosen kind is loaded. Attachments are kept
//! in order, so that a group that fails half-way can be undone to where it began.

use std::path::Path;

use aya::{
    programs::{
        uprobe::{UProbeLink, UProbeLinkId, UProbeScope},
        ProgramError, UProbe,
    },
    sys::{is_uprobe_multi_supported, UProbeMultiFeature},
    Ebpf,
};

/// Set `GPUTRACE_UPROBE_LINKS=perf-event` to use the per-probe path on a kernel that has
/// multi-uprobe links (tests compare the two; a user can rule the links out).
pub const LINKS_ENV: &str = "GPUTRACE_UPROBE_LINKS";

/// The suffix of a program's copy in a `uprobe.multi` section (`tracer-ebpf`'s
/// `uprobe_pair!`): the two copies must have different symbol names in the object.
pub const MULTI_SUFFIX: &str = "_multi";

pub use crate::model::LinkKind;
pub use crate::error::AttachError;

/// One attachment: the program's name (as the rest of gputrace knows it, without the
/// suffix) and aya's id of the link, which the program owns until it is taken.
struct Attachment {
    program: String,
    id: UProbeLinkId,
}

/// What detaching hands back: an owned link, closed by its drop. The caller decides when
/// and on which thread (closing waits for RCU grace periods: see [`drop_all`]).
pub type Detached = UProbeLink;

/// The uprobe programs' attachments, and which kind of link they are.
pub struct Uprobes {
    kind: LinkKind,
    links: Vec<Attachment>,
}

impl std::fmt::Debug for Uprobes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uprobes").field("kind", &self.kind).field("links", &self.links.len()).finish_non_exhaustive()
    }
}

/// The name of `program`'s copy for links of `kind` in the eBPF object.
fn object_name(program: &str, kind: LinkKind) -> std::borrow::Cow<'_, str> {
    match kind {
        LinkKind::Multi => format!("{program}{MULTI_SUFFIX}").into(),
        LinkKind::PerfEvent => program.into(),
    }
}

fn aya_program<'a>(ebpf: &'a mut Ebpf, program: &str, kind: LinkKind) -> Result<&'a mut UProbe, ProgramError> {
    ebpf.program_mut(&object_name(program, kind)).and_then(|p| p.try_into().ok()).ok_or(ProgramError::NotLoaded)
}

/// Whether this kernel takes multi-uprobe links: `Err` with why not, in words for a note.
/// Loads a two-instruction program, so it needs the privileges to.
pub fn multi_links_supported() -> Result<(), String> {
    match is_uprobe_multi_supported(UProbeMultiFeature::LinkCreation) {
        Ok(true) => Ok(()),
        Ok(false) => Err("this kernel has no multi-uprobe links (Linux ≥ 6.6)".to_owned()),
        Err(e) => Err(format!("whether this kernel has multi-uprobe links could not be told ({e})")),
    }
}

impl Uprobes {
    /// Multi-uprobe links where the kernel has them; else the perf-event path, with a note
    /// saying why (`None`: no note needed).
    #[must_use]
    pub fn new() -> (Self, Option<String>) {
        let perf_event = |note: String| (Self { kind: LinkKind::PerfEvent, links: Vec::new() }, Some(note));
        if std::env::var_os(LINKS_ENV).is_some_and(|v| v == "perf-event") {
            return perf_event(format!("uprobes attached one perf event each ({LINKS_ENV}=perf-event)"));
        }
        match multi_links_supported() {
            Ok(()) => (Self { kind: LinkKind::Multi, links: Vec::new() }, None),
            Err(why) => perf_event(format!("{why}: uprobes are attached one perf event each, and detaching them waits about 0.1 s per probe")),
        }
    }

    /// How the uprobes are attached.
    #[must_use]
    pub fn kind(&self) -> LinkKind {
        self.kind
    }

    /// Load `program` for this kind of link if it is not loaded yet (a verifier problem then
    /// shows at once, not at the first attach).
    pub fn prepare(&self, ebpf: &mut Ebpf, program: &str) -> Result<(), ProgramError> {
        let prog = aya_program(ebpf, program, self.kind)?;
        if prog.fd().is_err() {
            prog.load()?;
        }
        Ok(())
    }

    /// Load every one of `programs`; where a multi-uprobe copy is refused, fall back to the
    /// perf-event path for all of them, and say so in the returned note. An error only where
    /// the perf-event copies are refused too (or before anything is attached, never after).
    pub fn prepare_all(&mut self, ebpf: &mut Ebpf, programs: &[String]) -> Result<Option<String>, (String, ProgramError)> {
        let load_all = |this: &Self, ebpf: &mut Ebpf| programs.iter().try_for_each(|p| this.prepare(ebpf, p).map_err(|e| (p.clone(), e)));
        match load_all(self, ebpf) {
            Ok(()) => Ok(None),
            Err((program, e)) if self.kind == LinkKind::Multi && self.links.is_empty() => {
                log::warn!("multi-uprobe links: loading {program}: {e}");
                let note = format!("multi-uprobe links unusable (loading {program}: {e}); uprobes are attached one perf event each");
                self.kind = LinkKind::PerfEvent;
                load_all(self, ebpf)?;
                Ok(Some(note))
            }
            Err(e) => Err(e),
        }
    }

    /// `program`'s accumulated run time (ns) and runs, as the kernel counts them while
    /// `BPF_ENABLE_STATS` is held; None where it is not loaded.
    #[must_use]
    pub fn run_time(&self, ebpf: &Ebpf, program: &str) -> Option<(u64, u64)> {
        let info = ebpf.program(&object_name(program, self.kind))?.info().ok()?;
        Some((u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX), info.run_count()))
    }

    /// Attach `program` at file offset `offset` of `path`, for every process.
    pub fn attach(&mut self, ebpf: &mut Ebpf, program: &str, offset: u64, path: &Path) -> Result<(), AttachError> {
        self.prepare(ebpf, program)?;
        let id = aya_program(ebpf, program, self.kind)?.attach([offset], path, UProbeScope::AllProcesses)?;
        self.links.push(Attachment { program: program.to_owned(), id });
        Ok(())
    }

    /// Where the attachments stand now, for [`Self::undo_to`].
    #[must_use]
    pub fn mark(&self) -> usize {
        self.links.len()
    }

    /// Detach everything attached since `mark`: a group is attached whole or not at all.
    pub fn undo_to(&mut self, ebpf: &mut Ebpf, mark: usize) {
        let undone = self.links.split_off(mark.min(self.links.len()));
        drop_all(self.take(ebpf, undone));
    }

    /// The attachments of the programs `shed` names, owned, for the caller to close: the
    /// overhead budget takes the launch probes off for a while (`session::budget_controller`). Marks
    /// taken before are void after this.
    pub fn take_programs(&mut self, ebpf: &mut Ebpf, shed: impl Fn(&str) -> bool) -> Vec<Detached> {
        let (taken, kept) = std::mem::take(&mut self.links).into_iter().partition(|a| shed(&a.program));
        self.links = kept;
        self.take(ebpf, taken)
    }

    /// Every attachment, owned, for the caller to close (in parallel: see `ProbeSet::detach`).
    pub fn take_all(&mut self, ebpf: &mut Ebpf) -> Vec<Detached> {
        let all = std::mem::take(&mut self.links);
        self.take(ebpf, all)
    }

    fn take(&self, ebpf: &mut Ebpf, links: Vec<Attachment>) -> Vec<Detached> {
        links.into_iter().filter_map(|a| aya_program(ebpf, &a.program, self.kind).ok()?.take_link(a.id).ok()).collect()
    }
}

/// Close links on threads of their own, so that their grace periods overlap where the
/// kernel lets them (multi-uprobe links; perf events still take turns under its mutex).
pub fn drop_all<T: Send>(links: Vec<T>) {
    std::thread::scope(|scope| {
        for link in links {
            scope.spawn(move || drop(link));
        }
    });
}
