//! A cgroup's CPU throttling as the evidence keeps it (read by `gputrace::discover::cgroup`).

/// The `cpu.stat` counters that matter here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuStat {
    /// Enforcement periods that elapsed with a quota set.
    pub nr_periods: u64,
    /// Of those, the periods in which the cgroup ran out of quota and was throttled.
    pub nr_throttled: u64,
    /// Time its threads were throttled, microseconds (cgroup v1's nanoseconds converted).
    pub throttled_usec: u64,
}

impl CpuStat {
    /// Counters accumulated since `before`.
    #[must_use]
    pub fn since(&self, before: &Self) -> Self {
        Self {
            nr_periods: self.nr_periods.saturating_sub(before.nr_periods),
            nr_throttled: self.nr_throttled.saturating_sub(before.nr_throttled),
            throttled_usec: self.throttled_usec.saturating_sub(before.throttled_usec),
        }
    }
}
