//! How a detector's finding becomes a diagnosis, and the phrases the detectors share.

use super::{severity, Account};
use crate::model::{Diagnosis, DiagnosisId, TimeBucket};

/// A diagnosis whose impact is the part `bucket` of the time account.
pub fn diagnosis(id: DiagnosisId, bucket: TimeBucket, impact: f64, summary: String, evidence: Vec<String>, fix: &str) -> Diagnosis {
    let impact = impact.clamp(0.0, 1.0);
    Diagnosis {
        id,
        severity: severity(impact),
        impact,
        summary,
        evidence,
        fix: fix.into(),
        bucket: Some(bucket),
        saving: None,
        sites: Vec::new(),
    }
}

pub fn pct(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

pub fn gpu_line(a: &Account) -> Option<String> {
    let busy = a.gpu_util?;
    Some(match a.sm_active {
        Some(sm) => format!("NVML: a kernel was running {} of the time, SMs busy {} (GPM)", pct(busy), pct(sm)),
        None => format!("NVML: a kernel was running {} of the time", pct(busy)),
    })
}
