//! `gpu-bound`: the GPU is the limiter and the host keeps it fed: healthy. No host-side fix.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy},
        diagnosis::{gpu_line, pct},
        thresholds::HOST_WAIT_HIGH,
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, TimeBucket},
};

fn detect(_: &Evidence, a: &Account) -> Option<Diagnosis> {
    // NVML decides where it answered; without it, the host waiting for GPU work most of the
    // time (syncs and copy calls, less what the copies cost by their own doing).
    let waiting = a.waiting_for_gpu_work();
    let busy = a.gpu_busy().unwrap_or(waiting >= HOST_WAIT_HIGH);
    if !busy {
        return None;
    }
    let mut evidence = vec![format!("the launching threads waited for GPU work {} of the time", pct(waiting))];
    evidence.extend(gpu_line(a));
    Some(Diagnosis {
        id: DiagnosisId::GpuBound,
        severity: crate::severity::Severity::Info,
        impact: a.gpu_activity().unwrap_or(waiting),
        summary: "the GPU is the limiter: the host keeps it fed — healthy".into(),
        evidence,
        fix: "nothing on the host side; to go faster, make the GPU work cheaper (mixed precision, better kernels, larger tiles)".into(),
        bucket: Some(TimeBucket::WaitingOnGpu),
        saving: None,
        sites: Vec::new(),
    })
}


/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::GpuBound,
    found_by: FoundBy::Time(detect),
    stacks: None,
    effort: 3,
    fix: None,
    forms: None,
    in_framework: &[],
    bears_on: &[Bearing::Clocks, Bearing::OthersComputing],
};
