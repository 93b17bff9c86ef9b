//! `fragmentation`: allocations fail while memory is free in pieces. Found by the memory view
//! (`detect::memory_view`).

use crate::{
    detect::{definition::{Bearing, Definition, FoundBy, Words}},
    model::{DiagnosisId, Framework},
};


/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "JAX: keep shapes fixed (pad to a few bucket sizes) so that XLA reuses its buffers, lower the peak (jax.checkpoint, \
             donate_argnums), and leave XLA the share it preallocates (XLA_PYTHON_CLIENT_MEM_FRACTION)",
    )),
    (Framework::Tensorflow, Words::Fix(super::alloc_churn::TENSORFLOW)),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::Fragmentation,
    found_by: FoundBy::Memory,
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::OthersHolding],
};
