//! The GPU's idle time seen from the host: after a synchronize returns (or a synchronous
//! device-to-host copy completes) the GPU queue is empty until the thread launches again.
//! That needs no GPU timestamps and is a lower bound; NVML's `utilization.gpu` (time no
//! kernel ran) is the check where it answers.

use super::Account;
use crate::model::GpuIdle;

/// NVML samples `utilization.gpu` over its own periods (docs/facts.md: ~5 samples/s), so its
/// window does not match the trace's exactly: the bound may exceed NVML's idle by this
/// much before the two are called inconsistent.
const NVML_TOLERANCE: f64 = 0.10;

#[must_use]
pub fn gpu_idle(a: &Account) -> Option<GpuIdle> {
    let t = a.time.as_ref()?;
    let lower = t.fraction(t.queue_empty_ns);
    let nvml_idle = a.gpu_util.map(|u| (1.0 - u).clamp(0.0, 1.0));
    Some(GpuIdle {
        lower_bound_s: t.queue_empty_ns as f64 / 1e9,
        lower_bound_fraction: lower,
        nvml_idle_fraction: nvml_idle,
        consistent: nvml_idle.map(|idle| lower <= idle + NVML_TOLERANCE),
    })
}
