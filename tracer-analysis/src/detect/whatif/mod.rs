//! What a fix buys: one model of the step (`model`), each diagnosis's fix as a transformation
//! of it (its file in `detect::diagnoses`, made of the parts in `fixes`), simulated to a new
//! step time (`simulate`) — a what-if, as Daydream does from CUPTI traces, here from the
//! evidence the probes give. None promises more than the GPU's own busy time, the free cores
//! or the bus allow; `detect::rank` ranks the diagnoses by it.
//!
//! Every estimate is a range: the GPU's busy time and the launching share of host time are
//! known within bounds (`model::Range`), and the fix is simulated at both ends of each.

pub mod dispatch;
pub(crate) mod fixes;
pub mod model;
mod range;
pub mod simulate;

pub use model::StepModel;
pub use simulate::{Bound, Fix};

use crate::model::DiagnosisId;

/// A fix's simulated speed-up: the point estimate, the range the evidence allows, and what
/// bounds the step after it (at the point estimate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speedup {
    /// The step time before over the step time after at the model's point estimate (1 means no
    /// gain, never below).
    pub point: f64,
    /// The smallest speed-up over the ends of the GPU and launching-share ranges.
    pub lo: f64,
    /// The largest speed-up over the ends of those ranges.
    pub hi: f64,
    /// What limits the step after the fix, at the point estimate.
    pub bound: Bound,
    /// The workers the fix takes at the point estimate, for a fix that moves work to them.
    pub workers: Option<u32>,
    /// Today's step at the point estimate, as the model makes it without the tracer's own
    /// cost: a share of the traced window (1 where the probes added nothing to it).
    pub base: f64,
}

/// The speed-up of `fix` on `m`.
#[must_use]
pub fn speedup(m: &StepModel, fix: &Fix) -> Speedup {
    let at = |g: f64, d: f64| {
        let base = simulate::step_time(m, &Fix::NONE, g, d).0;
        let after = simulate::simulate(m, fix, g, d);
        // A fix never makes the step slower; an empty model changes nothing.
        let x = if after.t > 0.0 && base > 0.0 { (base / after.t).max(1.0) } else { 1.0 };
        (x, after, base)
    };
    let (point, after, base) = at(m.gpu.point, m.dispatch.share.point);
    let (mut lo, mut hi) = (point, point);
    for g in m.gpu.values() {
        for d in m.dispatch.share.values() {
            let (x, _, _) = at(g, d);
            lo = lo.min(x);
            hi = hi.max(x);
        }
    }
    Speedup { point, lo, hi, bound: after.bound, workers: after.workers, base }
}

/// Two fixes together, the pair that buys the most.
#[derive(Clone, Debug, PartialEq)]
pub struct BestPair {
    /// The two diagnoses whose fixes are combined.
    pub ids: [DiagnosisId; 2],
    /// What the two fixes buy together.
    pub speedup: Speedup,
}

/// What a bound means, in words.
#[must_use]
pub const fn describe(b: Bound) -> &'static str {
    match b {
        Bound::Gpu => "the GPU's own busy time",
        Bound::Cores => "the free cores",
        Bound::LaunchRate => "the launching left on the host",
        Bound::Input => "the workers producing the input",
        Bound::Host => "the host's remaining work",
        Bound::Bus => "the copies on the bus",
        Bound::Rank => "the slowest rank, which every collective waits for",
    }
}
