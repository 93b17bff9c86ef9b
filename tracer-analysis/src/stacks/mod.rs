//! Which code the traced threads ran, and what they were doing in it, as the analysis takes
//! it: stacks with the CUDA call their thread was in (`StackTime`), charged to call sites
//! (`sites`), allocation stacks (`alloc`), and the recorded form (`table`). How they are
//! taken and symbolized (the kernel's sampler, native unwinding, Python frames read from
//! outside) is the tracer's (`gputrace::stacks`).

pub mod alloc;
pub mod counts;
pub mod sites;
pub mod table;

use gputrace_common::{
    host::{launch_age, stacks::HOST},
    Family, PROBES,
};
use serde::{Deserialize, Serialize};

/// One frame of a stack, innermost first in [`StackTime::frames`].
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// The function (demangled), or the address in hex where it is unknown.
    pub function: String,
    /// The source file, where the debug information or the interpreter says.
    pub file: Option<String>,
    /// The line in `file`, where known.
    pub line: Option<u32>,
    /// The object file of a native frame.
    pub module: Option<String>,
}

impl Frame {
    /// `train.py:42 in train_step`, `loop.c:17 in compute`, or `compute (fakejob)`.
    #[must_use]
    pub fn location(&self) -> String {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => format!("{}:{line} in {}", short_path(file), self.function),
            (Some(file), None) => format!("{} in {}", short_path(file), self.function),
            _ => match &self.module {
                Some(m) => format!("{} ({})", self.function, short_path(m)),
                None => self.function.clone(),
            },
        }
    }
}

/// The last two components of a path: enough to find the file, short enough to read.
fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path.rsplit('/').take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// What a thread was doing when its stack was taken: the CUDA call it was inside, or host
/// code (which includes launching: launch probes are entry-only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    /// Host code outside any probed call, launching included.
    Host,
    /// Inside a synchronizing call.
    Sync,
    /// Inside a memory copy or memset.
    Copy,
    /// Inside a device allocation, or a pinned host allocation or registration.
    Alloc,
    /// Inside a device free, or a pinned host release or unregistration.
    Free,
    /// Inside any other probed call (context, mapping, NCCL, …).
    OtherCall,
}

impl Activity {
    /// The activity of a thread inside the call of probe `probe` (`HOST`: outside any).
    #[must_use]
    pub fn of_probe(probe: u32) -> Self {
        if probe == HOST {
            return Self::Host;
        }
        match PROBES.iter().find(|s| s.id == probe).map(|s| s.family) {
            Some(Family::Sync) => Self::Sync,
            Some(Family::Copy | Family::Memset) => Self::Copy,
            Some(Family::Alloc | Family::HostPin) => Self::Alloc,
            Some(Family::Free | Family::HostUnpin) => Self::Free,
            Some(Family::Launch | Family::GraphLaunch) => Self::Host,
            _ => Self::OtherCall,
        }
    }
}

/// Where the frames came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The kernel's user stack of the thread, symbolized from the process's ELF files.
    #[default]
    Native,
    /// The interpreter's frames of a CPython thread.
    Python,
}

/// Time of one thread on one stack, doing one thing, cumulative since the session began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackTime {
    /// The thread's id.
    pub tid: u32,
    /// The process it belongs to (its thread group id).
    pub pid: u32,
    /// What the thread was doing on this stack.
    pub activity: Activity,
    /// On a CPU (sampled there), or off it (asleep or blocked; for Python, an idle thread).
    pub on_cpu: bool,
    /// Where the frames came from.
    pub origin: Origin,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// Samples (or off-CPU spells) counted.
    pub count: u64,
    /// The time they stand for.
    pub ns: u64,
    /// Of the CPU samples of host code, how many were taken how long after their thread's
    /// latest launch ([`LaunchAges`]); empty where nobody said (off-CPU spells, samples
    /// inside calls, older recordings).
    pub launch_ages: LaunchAges,
}

/// A stack's CPU samples of host code by how long before each its thread last launched a
/// kernel or replayed a graph: the count in each class of `gputrace_common::host::launch_age`
/// (class k at index k − 1). Samples of unknown age are in none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LaunchAges(pub [u64; launch_age::CLASSES as usize]);

impl LaunchAges {
    /// Add `count` samples of class `class` (nothing for an unknown or unheard-of class).
    pub fn add(&mut self, class: u16, count: u64) {
        if let Some(slot) = (class as usize).checked_sub(1).and_then(|i| self.0.get_mut(i)) {
            *slot += count;
        }
    }

    /// These less an earlier reading of the same cumulative counts (`base`).
    #[must_use]
    pub fn since(&self, base: &Self) -> Self {
        let mut out = *self;
        for (a, b) in out.0.iter_mut().zip(base.0) {
            *a = a.saturating_sub(b);
        }
        out
    }

    /// Samples whose age is known.
    #[must_use]
    pub fn known(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Samples taken at least `ns` after their thread's latest launch: those of every class
    /// that begins there or later, and of the class that `ns` falls in the part above it, the
    /// ages taken as spread evenly over their class.
    #[must_use]
    pub fn at_least(&self, ns: u64) -> f64 {
        (1..=launch_age::CLASSES)
            .map(|c| {
                let (lo, hi) = (launch_age::lower_bound_ns(c), launch_age::upper_bound_ns(c));
                let above = if lo >= ns {
                    1.0
                } else if hi <= ns || hi == u64::MAX {
                    0.0
                } else {
                    (hi - ns) as f64 / (hi - lo) as f64
                };
                above * self.0[c as usize - 1] as f64
            })
            .sum()
    }

    /// Whether no sample's age is known (nothing to write).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.known() == 0
    }
}

impl StackTime {
    /// Whether `other` is the same thread, stack and activity (a later reading of this one).
    #[must_use]
    pub fn same_key(&self, other: &Self) -> bool {
        self.tid == other.tid
            && self.activity == other.activity
            && self.on_cpu == other.on_cpu
            && self.origin == other.origin
            && self.frames == other.frames
    }
}

/// At most this many frames are kept per stack: the call site is near the top, and a
/// recording writes every stack once a second.
pub const MAX_FRAMES: usize = 48;
