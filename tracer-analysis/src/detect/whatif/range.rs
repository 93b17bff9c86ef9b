//! A quantity the evidence knows within bounds, as the step model holds its estimates.

/// A quantity known within a range, with the value taken for the point estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Range {
    /// The lowest value the evidence allows.
    pub lo: f64,
    /// The value taken for the point estimate.
    pub point: f64,
    /// The highest value the evidence allows.
    pub hi: f64,
}

impl Range {
    /// A value known exactly: all three the same.
    #[must_use]
    pub fn exact(v: f64) -> Self {
        Self { lo: v, point: v, hi: v }
    }

    /// The three values to simulate with.
    #[must_use]
    pub fn values(&self) -> [f64; 3] {
        [self.lo, self.point, self.hi]
    }
}
