//! `alloc-churn`: device memory allocated and freed every step, the caching allocator bypassed
//! or emptied. Its fix keeps the allocator warm, and the device work the calls cause goes with
//! them.

use crate::{
    detect::{
        definition::{Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        whatif::{self, Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::thresholds::ALLOCS_PER_S;

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let m = &ev.allocs;
    // Counted from the start-up's end where the account left one out (a model loads there).
    let (count, frees) = a.time.as_ref().map_or((m.count, m.frees), |t| t.allocs_in(ev));
    let rate = if a.window_s == 0.0 { 0.0 } else { 2.0 * count.min(frees) as f64 / a.window_s };
    if rate < ALLOCS_PER_S {
        return None;
    }
    let allocating = a.share(|t| t.allocating_ns);
    Some(diagnosis(
        DiagnosisId::AllocChurn,
        TimeBucket::Allocating,
        allocating,
        format!("device memory is allocated and freed {rate:.0} times/s: the caching allocator is being bypassed or emptied"),
        vec![
            format!("{} allocations ({} bytes), {} frees, {} failed", m.count, m.bytes, m.frees, m.failures),
            format!("the launching threads spent {} of the window inside allocation calls", pct(allocating)),
        ],
        // Mappings mean expandable segments are already on: advising them would be noise.
        if ev.vmm.maps > 0 {
            "keep memory cached: drop torch.cuda.empty_cache() from the loop and keep tensor shapes stable (expandable segments are already in use: the churn is in their map/unmap calls)"
        } else {
            "keep memory cached: drop torch.cuda.empty_cache() from the loop, keep tensor shapes stable, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        },
    ))
}

fn fix(m: &StepModel, sm_over_util: Option<f64>) -> (Fix, String) {
    (
        Fix { keep: whatif::fixes::keep_all_but(|s| s.alloc = 0.0), gpu_scale: whatif::fixes::churn_device_work(m, sm_over_util), ..Fix::NONE },
        "a caching allocator left warm makes allocation calls nearly free, and the device work they cause goes with them".into(),
    )
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "JAX: keep shapes and dtypes fixed so that XLA reuses its buffers (pad batches to a few sizes); leave \
             XLA_PYTHON_CLIENT_ALLOCATOR at its default (\"platform\" allocates and frees on every use)",
    )),
    (Framework::Tensorflow, Words::Fix(TENSORFLOW)),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::AllocChurn,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Alloc, Activity::Free], None)),
    effort: 0,
    fix: Some(|_, m, sm_over_util| Some(fix(m, sm_over_util))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[],
};

/// TensorFlow's words for churn and for fragmentation alike (`fragmentation`'s too).
pub(super) const TENSORFLOW: &str = "in TensorFlow: keep shapes fixed (padded_batch to a few sizes, a tf.function input_signature) so that the allocator \
             reuses its blocks; TF_GPU_ALLOCATOR=cuda_malloc_async lets the driver pool the memory";
