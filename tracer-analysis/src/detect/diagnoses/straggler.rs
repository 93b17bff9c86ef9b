//! `straggler`: one rank's host phase makes the other ranks wait in their collectives. Found
//! from every rank's NCCL and time accounts (`detect::ranks`), with its fix its own cause's.
//! Once the straggler's own bottleneck is fixed, the others no longer wait for it.

use crate::{
    detect::{definition::{Definition, FoundBy}, whatif::Fix},
    model::{Diagnosis, DiagnosisId},
};


fn fix(d: &Diagnosis) -> (Fix, String) {
    (Fix { cut: d.impact, ranks_pace: false, ..Fix::NONE }, "with the straggler's own bottleneck fixed, the other ranks no longer wait for it in their collectives".into())
}


/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::Straggler,
    found_by: FoundBy::Collectives,
    stacks: None,
    effort: 2,
    fix: Some(|d, _, _| Some(fix(d))),
    forms: None,
    in_framework: &[],
    bears_on: &[],
};
