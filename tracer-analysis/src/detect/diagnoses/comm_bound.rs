//! `comm-bound`: collectives, not compute nor a rank, bound the step. Found from every rank's
//! NCCL and time accounts (`detect::ranks`). How much overlap or fewer bytes hide depends on
//! what the GPU computes meanwhile, which the host cannot see: no promise.

use crate::{
    detect::{definition::{Definition, FoundBy, Words}},
    model::{DiagnosisId, Framework},
};


/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "JAX: move fewer bytes between devices (bf16 gradients, sharding the state with jax.sharding instead of replicating \
             it), accumulate gradients over several micro-batches before each psum, or use a faster interconnect (NVLink rather than PCIe)",
    )),
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: move fewer bytes between devices (mixed precision, gradient accumulation before each all-reduce), pack \
             them (tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...)), or use a faster interconnect (NVLink rather than PCIe)",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::CommBound,
    found_by: FoundBy::Collectives,
    stacks: None,
    effort: 2,
    fix: None,
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[],
};
