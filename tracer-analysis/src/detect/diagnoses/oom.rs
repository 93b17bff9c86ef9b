//! `oom`: an allocation failed for lack of device memory. Found by the memory view
//! (`detect::memory_view`) from the failed allocation calls, with the stacks that allocated most.

use crate::{
    detect::{definition::{Bearing, Definition, FoundBy, Words}},
    model::{DiagnosisId, Framework},
};


/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "lower the peak: a smaller batch, activations rematerialized (jax.checkpoint), buffers donated to the step \
             (jax.jit(step, donate_argnums=...)); XLA_PYTHON_CLIENT_MEM_FRACTION above its 0.75 default gives XLA more of the GPU \
             where nothing else needs it",
    )),
    (Framework::Tensorflow, Words::Fix(
        "lower the peak: a smaller batch, mixed precision (tf.keras.mixed_precision.set_global_policy(\"mixed_float16\")); \
             where another process shares the GPU, tf.config.experimental.set_memory_growth(gpu, True) lets TensorFlow take only what it uses",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::Oom,
    found_by: FoundBy::Memory,
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::OthersHolding],
};
