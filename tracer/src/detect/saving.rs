//! What each fix would save, applied alone. A diagnosis's impact is what the problem costs;
//! the saving is the part of it the fix gives back, never more:
//!
//! - What a host-side fix gives back is host time that kept the GPU waiting. Where NVML says
//!   how much the GPU worked, no fix can save more than the time it did not work: past that
//!   the GPU becomes the limiter.
//! - Most fixes remove the cost outright (no sync every step, memory cached, a loader that
//!   keeps up, CPUs given back, I/O off the training thread, transfers overlapped). Pinning
//!   memory does not remove a copy, it makes it faster: docs/facts.md measured 4 MiB pageable H2D
//!   at 0.34 ms and pinned at 0.08 ms, so about three quarters of the staging goes.
//! - A transfer made non-blocking still takes its time on the bus: it can hide behind the
//!   rest of the step (compute, host work), not vanish. So `blocking-copy` saves at most the
//!   smaller of its impact and the rest of the window.
//! - Savings do not add up: fixing one problem may expose the next.
//!
//! With steps known, steps/s after the fix is steps/s × 1 / (1 − saving): the same work in
//! less wall time.

use super::Account;
use crate::model::{Diagnosis, DiagnosisId, Saving};

/// The share of the impact a fix removes, and why.
fn recoverable(id: DiagnosisId) -> (f64, &'static str) {
    match id {
        // Pinning alone makes the copy ~4× faster (docs/facts.md: 0.08 vs 0.34 ms for 4 MiB);
        // the fix also makes it non-blocking, which takes it off the host's path entirely:
        // what is left is the GPU's own time, which the cap below bounds. On the H200 the
        // pinned, non-blocking twin of the planted job ran 3.6× faster where 76 % of the
        // impact (pinning alone) predicted 2.1× (docs/validation.md).
        DiagnosisId::PageableCopy => (1.0, "a pinned, non-blocking copy overlaps the GPU's work; the GPU's own time then bounds the step"),
        DiagnosisId::LaunchBound => (1.0, "with graphs or fused kernels the launch overhead mostly goes; the GPU's own time then bounds the step"),
        DiagnosisId::HostSync => (1.0, "without a sync every step the host runs ahead and the queue never empties"),
        DiagnosisId::BlockingCopy => (1.0, "a non-blocking copy into pinned memory overlaps the rest of the step"),
        DiagnosisId::AllocChurn => (1.0, "a warm caching allocator makes allocation calls nearly free"),
        DiagnosisId::CpuStarved => (1.0, "with its CPUs the training thread runs when it is ready"),
        DiagnosisId::IoStall => (1.0, "I/O moved off the training thread overlaps the GPU's work"),
        DiagnosisId::InputStarved => (1.0, "a loader that keeps up leaves no wait between steps"),
        DiagnosisId::HostBound => (1.0, "host work taken off the step (into loader workers, or vectorized) stops delaying the launches"),
        DiagnosisId::HostSleep => (1.0, "without the sleep the loop launches as soon as it can"),
        DiagnosisId::CheckpointStall => (1.0, "an asynchronous checkpoint overlaps the training; what remains is its copy into pinned memory"),
        DiagnosisId::SmallKernels => (1.0, "at most: the same work filling the SMs would take that much less GPU time; a larger batch does more work per step instead"),
        _ => (1.0, "the time it costs"),
    }
}

/// Fill in `saving` for every diagnosis but `gpu-bound`.
pub fn estimate(found: &mut [Diagnosis], a: &Account, steps_per_s: Option<f64>) {
    for d in found.iter_mut().filter(|d| d.id != DiagnosisId::GpuBound) {
        let (share, why) = recoverable(d.id);
        let overlap = if d.id == DiagnosisId::BlockingCopy { 1.0 - d.impact } else { 1.0 };
        // GPU-side time (`small-kernels`) is not bounded by the GPU's idle time, nor is
        // allocation churn: memory freshly mapped after the cache was emptied is cleared by
        // the driver on the GPU, so the churn's own GPU work goes with it (on the H200 the
        // planted job's GPU was busy 88 % of the time and its twin without the churn ran
        // 10.8× faster, docs/validation.md).
        let cap = if d.bucket.is_none() || d.id == DiagnosisId::AllocChurn { overlap } else { a.gpu_idle_cap().min(overlap) };
        let fraction = (d.impact * share).min(cap).clamp(0.0, d.impact);
        let bound = if cap >= d.impact * share {
            String::new()
        } else if (cap - overlap).abs() < f64::EPSILON {
            format!("; an overlapped transfer still takes its time: it hides behind the other {:.0}% of the step at most", cap * 100.0)
        } else {
            format!("; capped at the {:.0}% of the time the GPU did not work (NVML)", cap * 100.0)
        };
        d.saving = Some(Saving {
            fraction,
            seconds: fraction * a.window_s,
            steps_per_s_after: steps_per_s.filter(|_| fraction < 1.0).map(|s| s / (1.0 - fraction)),
            basis: format!("{:.0}% of the {:.0}% it costs: {why}{bound}", share * 100.0, d.impact * 100.0),
        });
    }
}
