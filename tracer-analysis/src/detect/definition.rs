//! One diagnosis as one value (issue 59), in the manner of a command line's flag definitions:
//! where it is found, the code it names, what its fix asks of the user, its fix as a
//! transformation of the step model, that fix in each framework's terms, and the doctor's
//! checks that bear on it. Each diagnosis's file under `diagnoses/` holds its `DEFINITION`
//! beside its rule and its fix; `diagnoses::ALL` lists them, and the compiler checks that
//! list against `DiagnosisId` (docs/development.md, "A new diagnosis").

use super::{
    account::Account,
    whatif::{Fix, StepModel},
};
use crate::{
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework},
    stacks::Activity,
};

/// The stacks whose call sites a diagnosis names: their activities, and on or off the CPU
/// (None: both).
pub type Stacks = (&'static [Activity], Option<bool>);

/// A detector over the time account of the launching threads: `None` when its pattern is
/// absent, else the diagnosis with its impact, evidence and plain PyTorch fix.
pub type Rule = fn(&Evidence, &Account) -> Option<Diagnosis>;

/// Where a diagnosis is found.
#[derive(Clone, Copy, Debug)]
pub enum FoundBy {
    /// Its own rule over the time account (run by `detect::analyze`, in `DiagnosisId::ALL`'s
    /// order).
    Time(Rule),
    /// The memory view (`detect::memory_view`), which finds the memory diagnoses together from the
    /// allocation timeline.
    Memory,
    /// The ranks' NCCL and time accounts (`detect::ranks`), which need every rank's evidence.
    Collectives,
    /// A verdict only, when no diagnosis applies.
    VerdictOnly,
}

/// A diagnosis's fix as a transformation of the step model, with the sentence that says what
/// it does, given GPM's SM activity over NVML's utilization where known; None where this
/// evidence gives it no promise.
pub type FixOf = fn(&Diagnosis, &StepModel, Option<f64>) -> Option<(Fix, String)>;

/// The forms a fix can take where it has more than one: each a name, a transformation and
/// its sentence; the last is the one ranked (`rank::apply`).
pub type FormsOf = fn(&Diagnosis, &StepModel) -> Vec<(&'static str, Fix, String)>;

/// What a framework says in its own terms.
#[derive(Clone, Copy, Debug)]
pub enum Words {
    /// The fix, in place of plain PyTorch's.
    Fix(&'static str),
    /// Why the job holds memory it does not use, in place of PyTorch's caching allocator
    /// (the part of the summary after its first ": ").
    WhyHeld(&'static str),
}

/// A check of `gputrace doctor` that, failing or warning, bears on a diagnosis
/// (`doctor::bearing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bearing {
    /// The PCIe link narrower or slower than card and slot allow.
    PcieLink,
    /// The job's CPUs on another NUMA node than its GPU.
    Numa,
    /// The GPU's clocks held down (thermal, power brake).
    Clocks,
    /// Other processes computing on the same GPU.
    OthersComputing,
    /// Other processes holding memory on the same GPU.
    OthersHolding,
}

/// One diagnosis.
#[derive(Clone, Copy, Debug)]
pub struct Definition {
    /// Which it is.
    pub id: DiagnosisId,
    /// Where it is found.
    pub found_by: FoundBy,
    /// The stacks whose call sites it names; None: it names no code (the GPU-bound verdict;
    /// memory diagnoses rank allocation stacks by bytes instead, `stacks::alloc`).
    pub stacks: Option<Stacks>,
    /// How much its fix asks of the user, the least first: where two fixes buy the same
    /// (both meet the same bound: the GPU's busy time, the free cores), the simpler one is
    /// ranked first. 0: drop or thin out a call (an `empty_cache()`, a per-step `.item()`, a
    /// sleep, an in-loop save); 1: change a setting (loader workers, pinned memory,
    /// `non_blocking`, the CPUs given); 2: restructure the code (CUDA graphs or fusion,
    /// moving host work off the step, a larger batch); 3: no host-side fix.
    pub effort: u8,
    /// Its fix on the step model; None for what has no host-side fix to simulate.
    pub fix: Option<FixOf>,
    /// Its fix's several forms, where it has more than one.
    pub forms: Option<FormsOf>,
    /// Its words in the frameworks that say it their own way (the first per framework
    /// counts); the rest keep plain PyTorch's.
    pub in_framework: &'static [(Framework, Words)],
    /// The doctor's checks that bear on it.
    pub bears_on: &'static [Bearing],
}
