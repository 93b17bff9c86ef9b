//! `no-cuda-work`: a verdict only: no CUDA work was seen in the window.

use crate::{
    detect::{definition::{Definition, FoundBy}},
    model::{DiagnosisId},
};



/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::NoCudaWork,
    found_by: FoundBy::VerdictOnly,
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: &[],
    bears_on: &[],
};
