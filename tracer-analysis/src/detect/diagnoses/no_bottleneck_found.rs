//! `no-bottleneck-found`: a verdict only: CUDA work, no detector fired, and nothing says the GPU
//! is the limiter.

use crate::{
    detect::{definition::{Definition, FoundBy}},
    model::{DiagnosisId},
};



/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::NoBottleneckFound,
    found_by: FoundBy::VerdictOnly,
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: &[],
    bears_on: &[],
};
