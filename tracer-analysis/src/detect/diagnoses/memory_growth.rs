//! `memory-growth`: device memory grows every step, to the line that holds it. Found by the
//! memory view (`detect::memory_view`).

use crate::{
    detect::{definition::{Bearing, Definition, FoundBy, Words}},
    model::{DiagnosisId, Framework},
};


/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "find the device arrays that outlive their step (a Python list of outputs or metrics: keep jax.device_get copies, or \
             drop the references); jax.live_arrays() lists what is held; a jitted function retraced for new shapes keeps each \
             compilation's executable: keep shapes fixed",
    )),
    (Framework::Tensorflow, Words::Fix(
        "find the tensors that outlive their step (a Python list of results: keep .numpy() copies, or drop them), and \
             retracing: a tf.function called with new shapes or Python values builds a new graph each time \
             (tf.function(reduce_retracing=True), an input_signature)",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::MemoryGrowth,
    found_by: FoundBy::Memory,
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::OthersHolding],
};
