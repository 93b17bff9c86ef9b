//! Every uprobe gputrace attaches, whichever way the kernel allows: multi-uprobe links where
//! it has them (fast to detach, `multi_link`), else aya's perf-event uprobes. Attachments
//! are kept in order, so that a group that fails half-way can be undone to where it began.

use std::path::Path;

use aya::{
    programs::{
        uprobe::{UProbeLink, UProbeLinkId},
        ProgramError, UProbe,
    },
    Ebpf,
};

use super::multi_link;

/// Set `GPUTRACE_UPROBE_LINKS=perf-event` to use the per-probe path on a kernel that has
/// multi-uprobe links (tests compare the two; a user can rule the links out).
pub const LINKS_ENV: &str = "GPUTRACE_UPROBE_LINKS";

pub use crate::model::LinkKind;
pub use crate::error::AttachError;

enum Attachment {
    Multi { program: String, link: multi_link::Link },
    PerfEvent { program: String, id: UProbeLinkId },
}

impl Attachment {
    fn program(&self) -> &str {
        match self {
            Self::Multi { program, .. } | Self::PerfEvent { program, .. } => program,
        }
    }
}

/// What detaching hands back: owned links, each closed by its drop.
#[derive(Debug)]
pub enum Detached {
    /// One link for every offset of a program in one library.
    Multi(multi_link::Link),
    /// One perf event per offset, where multi-uprobe links are not available.
    PerfEvent(UProbeLink),
}

/// The uprobe programs' attachments.
pub struct Uprobes {
    multi: Option<multi_link::Programs>,
    links: Vec<Attachment>,
}

impl std::fmt::Debug for Uprobes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uprobes").field("kind", &self.kind()).field("links", &self.links.len()).finish_non_exhaustive()
    }
}

fn aya_program<'a>(ebpf: &'a mut Ebpf, program: &str) -> Result<&'a mut UProbe, ProgramError> {
    ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or(ProgramError::NotLoaded)
}

impl Uprobes {
    /// Multi-uprobe links where the kernel has them and the programs load for them; else
    /// the perf-event path, with a note saying why (`None`: no note needed).
    #[must_use]
    pub fn new(object: &[u8], ebpf: &Ebpf) -> (Self, Option<String>) {
        let perf_event = |note: Option<String>| (Self { multi: None, links: Vec::new() }, note);
        if std::env::var_os(LINKS_ENV).is_some_and(|v| v == "perf-event") {
            return perf_event(Some(format!("uprobes attached one perf event each ({LINKS_ENV}=perf-event)")));
        }
        if !multi_link::supported() {
            return perf_event(Some(
                "this kernel has no multi-uprobe links (Linux ≥ 6.6): uprobes are attached one perf event each, \
                 and detaching them waits about 0.1 s per probe"
                    .to_owned(),
            ));
        }
        match multi_link::Programs::load(object, ebpf) {
            Ok(programs) => (Self { multi: Some(programs), links: Vec::new() }, None),
            Err(e) => {
                log::warn!("multi-uprobe links: {e}");
                perf_event(Some(format!("multi-uprobe links unusable ({e}); uprobes are attached one perf event each")))
            }
        }
    }

    /// How the uprobes were attached: multi-uprobe links, or a perf event each.
    #[must_use]
    pub fn kind(&self) -> LinkKind {
        if self.multi.is_some() {
            LinkKind::Multi
        } else {
            LinkKind::PerfEvent
        }
    }

    /// Load `program` for the perf-event path, if that is the path and it is not loaded yet
    /// (a verifier problem then shows at once, not at the first attach).
    pub fn prepare(&self, ebpf: &mut Ebpf, program: &str) -> Result<(), ProgramError> {
        if self.multi.is_some() {
            return Ok(());
        }
        let prog = aya_program(ebpf, program)?;
        if prog.fd().is_err() {
            prog.load()?;
        }
        Ok(())
    }

    /// `program`'s accumulated run time (ns) and runs, wherever it was loaded (see
    /// `multi_link::run_time`); None where it is not loaded.
    #[must_use]
    pub fn run_time(&self, ebpf: &Ebpf, program: &str) -> Option<(u64, u64)> {
        if let Some(programs) = &self.multi {
            return programs.run_time(program);
        }
        let info = ebpf.program(program)?.info().ok()?;
        Some((u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX), info.run_count()))
    }

    /// Attach `program` at file offset `offset` of `path`, for every process.
    pub fn attach(&mut self, ebpf: &mut Ebpf, program: &str, offset: u64, path: &Path) -> Result<(), AttachError> {
        let attachment = if let Some(programs) = &self.multi {
            Attachment::Multi { program: program.to_owned(), link: programs.attach(program, path, offset)? }
        } else {
            self.prepare(ebpf, program)?;
            let id = aya_program(ebpf, program)?.attach(None, offset, path, None)?;
            Attachment::PerfEvent { program: program.to_owned(), id }
        };
        self.links.push(attachment);
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
        drop_all(take(ebpf, undone));
    }

    /// The attachments of the programs `shed` names, owned, for the caller to close: the
    /// overhead budget takes the launch probes off for a while (`session::budget_controller`). Marks
    /// taken before are void after this.
    pub fn take_programs(&mut self, ebpf: &mut Ebpf, shed: impl Fn(&str) -> bool) -> Vec<Detached> {
        let (taken, kept) = std::mem::take(&mut self.links).into_iter().partition(|a| shed(a.program()));
        self.links = kept;
        take(ebpf, taken)
    }

    /// Every attachment, owned, for the caller to close (in parallel: see `ProbeSet::detach`).
    pub fn take_all(&mut self, ebpf: &mut Ebpf) -> Vec<Detached> {
        take(ebpf, std::mem::take(&mut self.links))
    }
}

fn take(ebpf: &mut Ebpf, links: Vec<Attachment>) -> Vec<Detached> {
    links
        .into_iter()
        .filter_map(|a| match a {
            Attachment::Multi { link, .. } => Some(Detached::Multi(link)),
            Attachment::PerfEvent { program, id } => aya_program(ebpf, &program).ok()?.take_link(id).ok().map(Detached::PerfEvent),
        })
        .collect()
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
