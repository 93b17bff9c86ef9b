//! `small-kernels`: the GPU is busy in time but its SMs are mostly empty, each kernel too small
//! to fill it. Needs NVML's utilization and Hopper GPM's SM activity. Its fix gives each
//! kernel more work.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{gpu_line, pct},
        severity,
        whatif::{Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework},
    stacks::Activity,
};

/// NVML utilization at or above which the GPU is busy in time (a kernel nearly always runs).
const SMALL_KERNELS_UTIL: f64 = 0.80;
/// GPM SM activity below this share of the utilization: the kernels that run leave most SMs
/// empty.
const SMALL_KERNELS_SM_SHARE: f64 = 0.5;

/// The GPU is busy in time but its SMs are mostly empty: each kernel is too small to fill the
/// GPU (a small batch, CUDA graphs or XLA programs of tiny kernels). Needs both NVML's
/// utilization (time) and Hopper GPM's SM activity (space). The impact is GPU time, not a
/// host bucket: the time kernels ran with the SMs idle (utilization − SM activity). Host-side
/// problems are capped by the time no kernel ran, so the impacts still add up to at most 1.
fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let (util, sm) = (a.gpu_util?, a.sm_active?);
    if util < SMALL_KERNELS_UTIL || sm >= SMALL_KERNELS_SM_SHARE * util {
        return None;
    }
    let impact = (util - sm).clamp(0.0, 1.0);
    let graphs: u64 = ev.threads.values().map(crate::evidence::ThreadStats::graph_launches).sum();
    let mut evidence: Vec<String> = gpu_line(a).into_iter().collect();
    evidence.push(format!("{:.0} kernel launches/s and {:.0} graph launches/s", a.launch_rate - a.graph_rate, if a.window_s > 0.0 { graphs as f64 / a.window_s } else { 0.0 }));
    Some(Diagnosis {
        id: DiagnosisId::SmallKernels,
        severity: severity(impact),
        impact,
        summary: format!("the GPU runs kernels {} of the time but its SMs are busy only {}: the work is too small to fill it", pct(util), pct(sm)),
        evidence,
        fix: "give each kernel more work: a larger batch, fused or compiled kernels (torch.compile), larger graphs; or share the GPU with other jobs (MPS)".into(),
        bucket: None,
        saving: None,
        sites: Vec::new(),
    })
}

fn fix(_: &Diagnosis, _: &StepModel, sm_over_util: Option<f64>) -> Option<(Fix, String)> {
    let scale = sm_over_util?.clamp(0.0, 1.0);
    Some((Fix { gpu_scale: scale, ..Fix::NONE }, format!("the same work filling the SMs takes {:.0}% of the GPU time it takes now", scale * 100.0)))
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "give each dispatch more work: a larger batch, the whole step in one jax.jit, several steps in one call (jax.lax.scan), \
             small pieces batched with jax.vmap",
    )),
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: fewer, larger kernels — XLA (tf.function(jit_compile=True)), a larger batch, several steps per call \
             (model.compile(steps_per_execution=32))",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::SmallKernels,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host], Some(true))),
    effort: 2,
    fix: Some(fix),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::Clocks, Bearing::OthersComputing],
};
