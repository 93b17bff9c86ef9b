//! Every diagnosis, one file each, and the registry that lists them (issue 59). A file holds
//! the diagnosis's whole definition (`definition::Definition`): its rule, its fix as a
//! transformation of the step model, the fix in each framework's terms, what the fix asks of
//! the user, the stacks that name its code, the doctor's checks that bear on it. The compiler
//! checks [`ALL`] against `DiagnosisId`: one definition per id, in its order.
//!
//! A new diagnosis: a row in `DiagnosisId` (tracer-model), its file here, its line in [`ALL`]
//! (and a `mod`), and its section in docs/report.md (docs/development.md walks one through).

mod alloc_churn;
mod blocking_copy;
pub(crate) mod checkpoint_stall;
mod comm_bound;
mod cpu_starved;
mod fragmentation;
mod gpu_bound;
mod host_bound;
mod host_sleep;
mod host_sync;
mod input_starved;
mod io_stall;
pub(crate) mod launch_bound;
mod memory_growth;
mod memory_reserved;
mod no_bottleneck_found;
mod no_cuda_work;
mod oom;
mod pageable_copy;
mod small_kernels;
mod straggler;

use super::definition::{Definition, FoundBy, Rule, Stacks};
use crate::model::DiagnosisId;

/// Every diagnosis's definition, in `DiagnosisId::ALL`'s order.
pub const ALL: [&Definition; DiagnosisId::COUNT] = [
    &launch_bound::DEFINITION,
    &host_bound::DEFINITION,
    &host_sync::DEFINITION,
    &pageable_copy::DEFINITION,
    &blocking_copy::DEFINITION,
    &alloc_churn::DEFINITION,
    &cpu_starved::DEFINITION,
    &io_stall::DEFINITION,
    &input_starved::DEFINITION,
    &host_sleep::DEFINITION,
    &small_kernels::DEFINITION,
    &checkpoint_stall::DEFINITION,
    &gpu_bound::DEFINITION,
    &oom::DEFINITION,
    &fragmentation::DEFINITION,
    &memory_growth::DEFINITION,
    &memory_reserved::DEFINITION,
    &no_cuda_work::DEFINITION,
    &no_bottleneck_found::DEFINITION,
    &straggler::DEFINITION,
    &comm_bound::DEFINITION,
];

// The compiler's check: the list's length is the ids' count (its type), and each place holds
// its own id's definition, so `of` never gives another's.
const _: () = {
    let mut i = 0;
    while i < ALL.len() {
        assert!(ALL[i].id.index() == i, "diagnoses::ALL is out of DiagnosisId's order");
        i += 1;
    }
};

/// The definition of `id`.
#[must_use]
pub const fn of(id: DiagnosisId) -> &'static Definition {
    ALL[id.index()]
}

/// The stacks whose call sites `id` names (`sites::attach`).
#[must_use]
pub const fn stacks_of(id: DiagnosisId) -> Option<Stacks> {
    of(id).stacks
}

/// What `id`'s fix asks of the user (`Definition::effort`).
#[must_use]
pub const fn effort(id: DiagnosisId) -> u8 {
    of(id).effort
}

/// The time rules and the diagnosis each finds, in `DiagnosisId::ALL`'s order (ties in
/// impact keep it).
pub fn time_rules() -> impl Iterator<Item = (DiagnosisId, Rule)> {
    ALL.into_iter().filter_map(|d| match d.found_by {
        FoundBy::Time(rule) => Some((d.id, rule)),
        FoundBy::Memory | FoundBy::VerdictOnly | FoundBy::Collectives => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_in_all_once_and_in_the_order_of_its_declaration() {
        for (i, id) in DiagnosisId::ALL.into_iter().enumerate() {
            assert_eq!(id.index(), i, "{id} is out of place in DiagnosisId::ALL");
            assert_eq!(of(id).id, id);
        }
    }

    #[test]
    fn every_host_side_problem_names_its_code_and_nothing_else_does() {
        for id in [DiagnosisId::Oom, DiagnosisId::Fragmentation, DiagnosisId::MemoryGrowth, DiagnosisId::MemoryReserved] {
            assert!(matches!(of(id).found_by, FoundBy::Memory), "{id}");
        }
        for d in ALL {
            let names_code = matches!(d.found_by, FoundBy::Time(_)) && d.id != DiagnosisId::GpuBound;
            assert_eq!(d.stacks.is_some(), names_code, "{}", d.id);
            // What has no host-side fix promises nothing and asks the most.
            if d.fix.is_none() && d.id != DiagnosisId::CommBound {
                assert_eq!(d.effort, 3, "{}", d.id);
            }
            assert!(d.forms.is_none() || d.fix.is_some(), "{}: forms of no fix", d.id);
        }
    }

    #[test]
    fn no_framework_says_a_diagnosis_twice() {
        for d in ALL {
            for (i, (fw, words)) in d.in_framework.iter().enumerate() {
                let same = |(f, w): &(crate::model::Framework, super::super::definition::Words)| f == fw && std::mem::discriminant(w) == std::mem::discriminant(words);
                assert!(!d.in_framework[..i].iter().any(same), "{}: {fw:?} twice", d.id);
            }
        }
    }
}
