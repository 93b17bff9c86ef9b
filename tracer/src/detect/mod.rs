//! From evidence to diagnoses. Each detector is a pure function of the evidence that returns
//! a diagnosis with its impact (the fraction of the window's wall time it costs), the
//! evidence in numbers, and the fix. Thresholds are named constants with their origin.
//!
//! This first set works from the CUDA call evidence of the launching ("main") thread alone;
//! scheduler, block I/O and NVML evidence refine it as they arrive.

mod rules;

use crate::{evidence::Evidence, report::model::Diagnosis};

/// What the detectors look at.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub window_ns: u64,
    pub evidence: &'a Evidence,
}

/// Impact at or above which a problem is `high`, `medium`, `low`.
pub const HIGH: f64 = 0.25;
pub const MEDIUM: f64 = 0.10;
pub const LOW: f64 = 0.03;

/// Verdict when no CUDA work was seen at all.
pub const NO_CUDA_WORK: &str = "no-cuda-work";

#[must_use]
pub fn severity(impact: f64) -> &'static str {
    if impact >= HIGH {
        "high"
    } else if impact >= MEDIUM {
        "medium"
    } else if impact >= LOW {
        "low"
    } else {
        "info"
    }
}

/// Ranked diagnoses and the verdict: the problem with the largest impact if any is at least
/// `medium`, else `gpu-bound` when the GPU keeps the host waiting, else the largest found.
#[must_use]
pub fn diagnose(inputs: &Inputs<'_>) -> (String, Vec<Diagnosis>) {
    let mut found: Vec<Diagnosis> = rules::ALL.iter().filter_map(|rule| rule(inputs)).collect();
    found.sort_by(|a, b| b.impact.total_cmp(&a.impact));
    let problems = || found.iter().filter(|d| d.id != rules::GPU_BOUND);
    let verdict = if let Some(top) = problems().find(|d| d.impact >= MEDIUM) {
        top.id.clone()
    } else if let Some(g) = found.iter().find(|d| d.id == rules::GPU_BOUND) {
        g.id.clone()
    } else if let Some(top) = problems().next() {
        top.id.clone()
    } else {
        NO_CUDA_WORK.to_owned()
    };
    (verdict, found)
}
