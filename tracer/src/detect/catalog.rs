//! Every diagnosis in one place: where it comes from (a time rule over the launching
//! threads, the memory view, or the verdict alone) and which stacks name its code. One
//! exhaustive match, so a new `DiagnosisId` does not compile until it says both; its fix as a
//! transformation of the step model is the other exhaustive match (`whatif::fixes::of`), and
//! the tests below check that the rule lists, `DiagnosisId::ALL` and this table agree.

use super::rules::Rule;
use crate::{model::DiagnosisId, stacks::Activity};

/// Where a diagnosis is found.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// A rule over the time account of the launching threads (run by `detect::analyze`).
    Time(Rule),
    /// The memory view (`detect::memory::diagnose`).
    Memory,
    /// A verdict only, when no diagnosis applies.
    VerdictOnly,
    /// The ranks' NCCL and time accounts (`detect::nccl`).
    Collectives,
}

/// The stacks whose call sites a diagnosis names: their activities, and on or off the CPU
/// (None: both).
pub type Stacks = (&'static [Activity], Option<bool>);

/// One diagnosis's entry.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Where the diagnosis is found.
    pub source: Source,
    /// None: it names no code (the GPU-bound verdict; memory diagnoses rank allocation
    /// stacks by bytes instead, `stacks::alloc`).
    pub stacks: Option<Stacks>,
}

const HOST_ON_CPU: Option<Stacks> = Some((&[Activity::Host], Some(true)));

/// The entry of `id`.
#[must_use]
pub const fn entry(id: DiagnosisId) -> Entry {
    use super::{checkpoint_stall, host_rules, rules};
    use Source::{Collectives, Memory, Time, VerdictOnly};
    let (source, stacks): (Source, Option<Stacks>) = match id {
        DiagnosisId::LaunchBound => (Time(rules::launch_bound), HOST_ON_CPU),
        DiagnosisId::HostBound => (Time(rules::host_bound), HOST_ON_CPU),
        DiagnosisId::HostSync => (Time(rules::host_sync), Some((&[Activity::Sync, Activity::Copy], None))),
        DiagnosisId::PageableCopy => (Time(rules::pageable_copy), Some((&[Activity::Copy], None))),
        DiagnosisId::BlockingCopy => (Time(rules::blocking_copy), Some((&[Activity::Copy], None))),
        DiagnosisId::AllocChurn => (Time(rules::alloc_churn), Some((&[Activity::Alloc, Activity::Free], None))),
        DiagnosisId::CpuStarved => (Time(host_rules::cpu_starved), HOST_ON_CPU),
        DiagnosisId::IoStall => {
            (Time(host_rules::io_stall), Some((&[Activity::Host, Activity::Copy, Activity::Sync, Activity::Alloc, Activity::OtherCall], Some(false))))
        }
        DiagnosisId::InputStarved => (Time(host_rules::input_starved), Some((&[Activity::Host], None))),
        DiagnosisId::HostSleep => (Time(host_rules::host_sleep), Some((&[Activity::Host], Some(false)))),
        DiagnosisId::SmallKernels => (Time(rules::small_kernels), HOST_ON_CPU),
        DiagnosisId::CheckpointStall => (Time(checkpoint_stall::checkpoint_stall), Some((&[Activity::Copy], None))),
        DiagnosisId::GpuBound => (Time(rules::gpu_bound), None),
        DiagnosisId::Oom | DiagnosisId::Fragmentation | DiagnosisId::MemoryGrowth | DiagnosisId::MemoryReserved => (Memory, None),
        DiagnosisId::NoCudaWork | DiagnosisId::NoBottleneckFound => (VerdictOnly, None),
        DiagnosisId::Straggler | DiagnosisId::CommBound => (Collectives, None),
    };
    Entry { source, stacks }
}

/// How much a diagnosis's fix asks of the user, the least first: where two fixes buy the
/// same (both meet the same bound: the GPU's busy time, the free cores), the simpler one is
/// ranked first. 0: drop or thin out a call (an `empty_cache()`, a per-step `.item()`, a
/// sleep, an in-loop save); 1: change a setting (loader workers, pinned memory,
/// `non_blocking`, the CPUs given); 2: restructure the code (CUDA graphs or fusion, moving
/// host work off the step, a larger batch). Diagnoses without a host-side fix: 3.
#[must_use]
pub const fn effort(id: DiagnosisId) -> u8 {
    match id {
        DiagnosisId::AllocChurn | DiagnosisId::HostSync | DiagnosisId::HostSleep | DiagnosisId::CheckpointStall => 0,
        DiagnosisId::InputStarved | DiagnosisId::PageableCopy | DiagnosisId::BlockingCopy | DiagnosisId::CpuStarved | DiagnosisId::IoStall => 1,
        // The straggler's fix is its own bottleneck's; comm-bound's restructures the job.
        DiagnosisId::LaunchBound | DiagnosisId::HostBound | DiagnosisId::SmallKernels | DiagnosisId::Straggler | DiagnosisId::CommBound => 2,
        DiagnosisId::GpuBound
        | DiagnosisId::Oom
        | DiagnosisId::Fragmentation
        | DiagnosisId::MemoryGrowth
        | DiagnosisId::MemoryReserved
        | DiagnosisId::NoCudaWork
        | DiagnosisId::NoBottleneckFound => 3,
    }
}

/// The time rules and the diagnosis each finds, in `DiagnosisId::ALL`'s order (ties in
/// impact keep it).
pub fn time_rules() -> impl Iterator<Item = (DiagnosisId, Rule)> {
    DiagnosisId::ALL.into_iter().filter_map(|id| match entry(id).source {
        Source::Time(rule) => Some((id, rule)),
        Source::Memory | Source::VerdictOnly | Source::Collectives => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_in_all_once_and_in_the_order_of_its_declaration() {
        // `index` is an exhaustive match: a new variant must be given its place there, and
        // then this fails until `ALL` lists it.
        for (i, id) in DiagnosisId::ALL.into_iter().enumerate() {
            assert_eq!(id.index(), i, "{id} is out of place in DiagnosisId::ALL");
        }
    }

    #[test]
    fn every_time_rule_finds_only_its_own_diagnosis_and_memory_ids_are_the_memory_views() {
        // That a rule that fires returns its own id is asserted where the rules run
        // (`detect::analyze`, in debug builds: the unit tests of `detect::tests` fire each);
        // here the list itself: one rule per time diagnosis, none for the others.
        let time = DiagnosisId::ALL.iter().filter(|id| matches!(entry(**id).source, Source::Time(_))).count();
        assert_eq!(time_rules().count(), time);
        for id in [DiagnosisId::Oom, DiagnosisId::Fragmentation, DiagnosisId::MemoryGrowth, DiagnosisId::MemoryReserved] {
            assert!(matches!(entry(id).source, Source::Memory), "{id}");
        }
        for id in DiagnosisId::ALL {
            let named = entry(id).stacks.is_some();
            let names_code = matches!(entry(id).source, Source::Time(_)) && id != DiagnosisId::GpuBound;
            assert_eq!(named, names_code, "{id}: every host-side problem names its code, nothing else does");
        }
    }
}
