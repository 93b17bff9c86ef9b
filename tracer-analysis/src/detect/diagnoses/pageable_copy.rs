//! `pageable-copy`: host↔device copies from pageable memory, which the host stages
//! synchronously through a driver buffer. Its fix pins the buffers and copies without
//! blocking.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        whatif::{self, Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let c = &ev.copies;
    let pageable = c.h2d.pageable + c.d2h.pageable;
    if pageable == 0 || a.window_s == 0.0 {
        return None;
    }
    let copies = c.h2d.count + c.d2h.count;
    // Pageable copies are staged through a driver buffer while the host waits (docs/facts.md: 4 MiB
    // pageable H2D 0.34 ms vs pinned 0.08 ms). The call also waits for the GPU work queued
    // before it, which is not the copy's cost: each call is charged at most its staging time
    // (`evidence::cost`). NVML caps it by the time the GPU did not work.
    let staging = a.share(|t| t.pageable_staging_ns);
    let impact = staging.min(a.gpu_idle_cap());
    Some(diagnosis(
        DiagnosisId::PageableCopy,
        TimeBucket::InCopies,
        impact,
        format!("{pageable} of {copies} host↔device copies use pageable memory, which the host must stage synchronously"),
        vec![
            format!("H2D: {} pageable copies, {} bytes", c.h2d.pageable, c.h2d.pageable_bytes),
            format!("D2H: {} pageable copies, {} bytes", c.d2h.pageable, c.d2h.pageable_bytes),
            format!("staging them took about {} of the time on the launching threads", pct(staging)),
            "classified from the traced pinning calls and the process memory map (pinned memory is a shared /dev/zero mapping)".into(),
        ],
        "pin the host buffers: DataLoader(pin_memory=True) or tensor.pin_memory(), then copy with .to(device, non_blocking=True)",
    ))
}

fn fix(m: &StepModel) -> (Fix, String) {
    (whatif::fixes::pinned_copies(m), "pinned, non-blocking copies are neither staged by the host nor waited for; they still take their time on the bus".into())
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "JAX copies numpy inputs from pageable memory: put the next batch on the device while the step runs (jax.device_put ahead \
             of time, as flax.jax_utils.prefetch_to_device does), or stage batches in pinned host memory (a sharding with \
             memory_kind=\"pinned_host\")",
    )),
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: let tf.data copy the next batch to the GPU while the step runs \
             (dataset.apply(tf.data.experimental.prefetch_to_device(\"/gpu:0\")), after .prefetch)",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::PageableCopy,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Copy], None)),
    effort: 1,
    fix: Some(|_, m, _| Some(fix(m))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::PcieLink, Bearing::Numa],
};
