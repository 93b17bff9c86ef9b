//! Per-thread evidence.

use gputrace_common::{Family, PROBES, PROBE_SLOTS};

use super::Direction;

/// One thread's CUDA calls, probe hits, and the host time it spent inside the calls (ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadStats {
    /// The thread's process (tgid).
    pub pid: u32,
    /// Probe hits, by probe id (from the kernel's per-thread counters).
    pub hits: [u64; PROBE_SLOTS],
    /// Copy calls.
    pub copies: u64,
    /// Host time inside copy calls, ns.
    pub copy_ns: u64,
    /// Synchronize calls, and synchronous scalar reads (a blocking copy of a few bytes to the
    /// host drains the queue as a synchronize does).
    pub syncs: u64,
    /// Host time inside synchronize calls, ns (a synchronous scalar read's stays in `copy_ns`).
    pub sync_wait_ns: u64,
    /// Host time inside device allocation, free, map and unmap calls, and those calls.
    pub alloc_ns: u64,
    /// Device allocation, free, map and unmap calls.
    pub allocs: u64,
    /// Time between a queue-draining call's return and this thread's next launch: the
    /// device queue was empty then (a lower bound on GPU idle time).
    pub queue_idle_ns: u64,
    /// Empty-queue spells counted in `queue_idle_ns` (an estimate where the launch probes were
    /// off part of the time).
    pub idle_periods: u64,
    /// When its first CUDA call began (monotonic ns; 0 before any).
    pub first_ns: u64,
    /// When its last CUDA call returned (monotonic ns; 0 before any).
    pub last_ns: u64,
    /// What the copies cost by their own doing, as estimated per call (see
    /// `evidence::cost`): pageable copies' staging, synchronous copy APIs' transfer, and
    /// the transfer part of the synchronizes that waited for async bulk copies.
    pub pageable_copy_cost_ns: u64,
    /// Of `copy_ns`, the transfer of synchronous copies between host and device whose host
    /// side was not found pageable, estimated at pinned speed, ns.
    pub sync_copy_cost_ns: u64,
    /// Of `copy_sync_wait_ns`, the transfer part, estimated from the bytes copied at
    /// pinned speed, ns.
    pub copy_wait_transfer_ns: u64,
    /// Synchronize waits that followed an async bulk copy (the whole wait: GPU work queued
    /// before the copy, then the copy).
    pub copy_sync_wait_ns: u64,
    /// Times of the recurring synchronizes and copies, to find training steps.
    pub markers: super::steps::Markers,
    /// Direction and bytes of this thread's async copies since its last sync (cleared by a
    /// sync; a copy in another direction replaces them).
    pub(super) last_async_copy: Option<(Direction, u64)>,
    /// Where the overhead budget took the launch probes off part of the time, how this
    /// thread's launch counts are scaled (`Evidence::scale_sampled_launches`).
    pub launch_sampling: Option<LaunchSampling>,
    /// CUDA calls (with a return probe) of this thread since the budget first took the
    /// launch probes off, and of them those made while they were off.
    pub calls_seen: u64,
    /// Of `calls_seen`, those made while the launch probes were off.
    pub calls_while_launches_off: u64,
}

impl ThreadStats {
    /// Empty figures for a thread of process `pid`.
    #[must_use]
    pub fn new(pid: u32) -> Self {
        Self {
            pid,
            hits: [0; PROBE_SLOTS],
            copies: 0,
            copy_ns: 0,
            syncs: 0,
            sync_wait_ns: 0,
            alloc_ns: 0,
            allocs: 0,
            queue_idle_ns: 0,
            idle_periods: 0,
            first_ns: 0,
            last_ns: 0,
            pageable_copy_cost_ns: 0,
            sync_copy_cost_ns: 0,
            copy_wait_transfer_ns: 0,
            copy_sync_wait_ns: 0,
            markers: super::steps::Markers::default(),
            last_async_copy: None,
            launch_sampling: None,
            calls_seen: 0,
            calls_while_launches_off: 0,
        }
    }

    fn family_hits(&self, family: Family) -> u64 {
        PROBES.iter().filter(|p| p.family == family).map(|p| self.hits_estimated(p.id as usize)).sum()
    }

    /// Kernel launches, each counted once (only the driver layer counts launches); an
    /// estimate where the launch probes were on part of the time.
    #[must_use]
    pub fn kernel_launches(&self) -> u64 {
        self.family_hits(Family::Launch)
    }

    /// CUDA graph launches; an estimate where the launch probes were on part of the time.
    #[must_use]
    pub fn graph_launches(&self) -> u64 {
        self.family_hits(Family::GraphLaunch)
    }

    /// Hits of probe `id`: as counted, or for a launch probe taken off part of the time, the
    /// hits before the budget first took it off plus those after, scaled by the part of the
    /// thread's activity the probe saw then.
    #[must_use]
    pub fn hits_estimated(&self, id: usize) -> u64 {
        let counted = self.hits.get(id).copied().unwrap_or(0);
        match &self.launch_sampling {
            Some(s) if s.part > 0 && s.part < s.whole && s.sampled.get(id).copied().unwrap_or(false) => {
                let before = s.before.get(id).copied().unwrap_or(0).min(counted);
                // Hits of the off phases are left out: their calls are part of the whole the
                // rest is scaled to (`Evidence::lingering_hits`).
                let on = counted - before - s.lingering.get(id).copied().unwrap_or(0).min(counted - before);
                before + (on as f64 * s.whole as f64 / s.part as f64).round() as u64
            }
            _ => counted,
        }
    }
}

/// How a thread's launch counts are scaled to the window (`ThreadStats::hits_estimated`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSampling {
    /// Which probe ids were taken off part of the time.
    pub sampled: [bool; PROBE_SLOTS],
    /// The thread's hits when the budget first took them off (all seen).
    pub before: [u64; PROBE_SLOTS],
    /// Hits counted while they were off (probes the kernel had not taken out yet).
    pub lingering: [u64; PROBE_SLOTS],
    /// Since then: the part of the thread's activity the probes saw, and the whole (its
    /// calls, or the time in ns where it made too few calls).
    pub part: u64,
    pub whole: u64,
}
