//! `memory-reserved`: memory reserved through the driver and never used (a caching allocator's
//! reserve, a framework's preallocation). Found by the memory view (`detect::memory_view`); in the
//! frameworks that preallocate, the summary says why in their terms.

use crate::{
    detect::{definition::{Bearing, Definition, FoundBy, Words}},
    model::{DiagnosisId, Framework},
};


/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Vllm, Words::Fix(
        "a problem only where other jobs need the memory: LLM(..., gpu_memory_utilization=0.5) or vllm serve --gpu-memory-utilization 0.5 \
             (less KV cache: fewer sequences at once)",
    )),
    (Framework::Sglang, Words::Fix(
        "a problem only where other jobs need the memory: --mem-fraction-static 0.5 (less KV cache: fewer requests at once)",
    )),
    (Framework::Jax, Words::Fix(
        "JAX preallocates 75 % of the GPU at start: XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand), or \
             XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 for a fixed share, when the GPU is shared",
    )),
    (Framework::Tensorflow, Words::Fix(
        "TensorFlow maps nearly all GPU memory at start: tf.config.experimental.set_memory_growth(gpu, True), or a memory_limit \
             through tf.config.set_logical_device_configuration, when the GPU is shared",
    )),
    (Framework::Jax, Words::WhyHeld(
        "XLA's allocator preallocates a share of the GPU at start (75 % by default) and keeps it, so nvidia-smi shows it used whatever the arrays in it",
    )),
    (Framework::Tensorflow, Words::WhyHeld(
        "TensorFlow maps nearly all of the GPU's memory at start and keeps it, so nvidia-smi shows it used whatever the tensors in it",
    )),
    (Framework::Vllm, Words::WhyHeld(
        "vLLM reserves gpu_memory_utilization of the GPU (0.9 by default) at start for the weights and the KV cache, and keeps it",
    )),
    (Framework::Sglang, Words::WhyHeld(
        "SGLang reserves --mem-fraction-static of the GPU at start for the weights and the KV cache, and keeps it",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::MemoryReserved,
    found_by: FoundBy::Memory,
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::OthersHolding],
};
