//! Copies, memsets and synchronizes seen only part of the time: where the overhead budget
//! took their probes off as well as the launches' (`session::budget_controller`), what they
//! counted while on is scaled to the window.
//!
//! Every call record comes from an on phase, so each figure built from them is scaled to the
//! window. Times (inside copies, waiting in syncs) scale by the window over the time the
//! probes were on: a share of the on phases is taken as the share of the window. The
//! scheduler's accounting stays exact over the whole window, so the time account still adds
//! up: a thread's sleep outside CUDA calls is its whole sleep less the scaled time inside
//! them. Wakeups are tagged "inside CUDA" by the call probes, so those of the off phases
//! (tagged as nothing was seen) are left out and the rest scaled alike.
//!
//! Counts (calls, bytes, launches) scale by time too, which makes them low: the traps slowed
//! the on phases, so a loop made fewer steps a second then than while the probes were off.
//! By how much cannot be known without an exact count through the off phases, and none runs
//! there; the report says they read low, with the traps' estimated share of the busiest
//! thread. Taking that share out was tried: the estimate of a trap's cost is too noisy for
//! it (on the fake CUDA three runs read 44–81 % for a true 42 %, and the counts came out
//! 0.9–2.5× the truth). By time alone, a loop of `.item()` on the fake CUDA, whose traps
//! slow it 1.7×, read 0.45× its syncs.
//!
//! What this cannot see: a copy burst (a checkpoint) that falls wholly in an off phase, and
//! a step whose calls straddle one (`evidence::steps::rhythm` leaves such intervals out).
//! Stack samples of an off phase are charged to host work: no probe says which call a
//! thread is in then. Allocation probes are never taken off.

use std::collections::BTreeMap;

use gputrace_common::{WakeKey, WakeStats};

use super::{CopyStats, DirStats, Evidence};

/// Off-CPU time the wakeups of one key ended during the off phases, and how often.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffPhaseWakes {
    /// Wakeups.
    pub count: u64,
    /// Off-CPU time they ended, ns.
    pub ns: u64,
    /// Of `ns`, uninterruptible (`D`) time.
    pub blocked_ns: u64,
}

/// The wakeup map's readings around the off phases: off-phase deltas per key.
#[derive(Clone, Debug, Default)]
pub struct WakesOff {
    at_shed: Option<Vec<(WakeKey, WakeStats)>>,
    /// Deltas summed over the off phases, by (woken tid, waker pid, waker stack id, inside a
    /// CUDA call).
    pub by_key: BTreeMap<(u32, u32, i64, bool), OffPhaseWakes>,
}

impl WakesOff {
    /// The calls went off; `now` is the wakeup map then.
    pub fn off(&mut self, now: Vec<(WakeKey, WakeStats)>) {
        self.at_shed.get_or_insert(now);
    }

    /// The calls are back on (or the window ended with them off); `now` is the map then.
    pub fn on(&mut self, now: &[(WakeKey, WakeStats)]) {
        let Some(then) = self.at_shed.take() else { return };
        let before: BTreeMap<_, _> = then.iter().map(|(k, s)| (key(k), *s)).collect();
        for (k, s) in now {
            let b = before.get(&key(k)).copied().unwrap_or_default();
            let d = self.by_key.entry(key(k)).or_default();
            d.count += s.count.saturating_sub(b.count);
            d.ns += s.ns.saturating_sub(b.ns);
            d.blocked_ns += s.blocked_ns.saturating_sub(b.blocked_ns);
        }
    }

    /// Whether the calls are off now.
    #[must_use]
    pub fn is_off(&self) -> bool {
        self.at_shed.is_some()
    }
}

fn key(k: &WakeKey) -> (u32, u32, i64, bool) {
    (k.tid, k.waker_tgid, k.stack_id, k.in_cuda != 0)
}

fn scale(n: u64, by: f64) -> u64 {
    (n as f64 * by).round() as u64
}

impl DirStats {
    fn scale(&mut self, by: f64) {
        for n in [
            &mut self.count,
            &mut self.bytes,
            &mut self.pageable,
            &mut self.pageable_bytes,
            &mut self.pinned_traced,
            &mut self.pinned_by_map,
            &mut self.unknown_host,
            &mut self.sync_api,
            &mut self.then_synced,
            &mut self.scalar_reads,
        ] {
            *n = scale(*n, by);
        }
        for ns in [&mut self.call_ns, &mut self.then_synced_wait_ns, &mut self.scalar_read_wait_ns] {
            *ns = scale(*ns, by);
        }
    }
}

impl CopyStats {
    fn scale(&mut self, by: f64) {
        for d in [&mut self.h2d, &mut self.d2h, &mut self.d2d, &mut self.peer, &mut self.h2h] {
            d.scale(by);
        }
    }
}

impl Evidence {
    /// The copy, memset and sync probes went off at `at_ns`. No call entered from then on
    /// takes a slot in the kernel (`gputrace_common::call_epoch`), so no record comes from
    /// the probes that fire while their links close: none is counted, then scaled again.
    pub fn call_probes_off(&mut self, at_ns: u64) {
        if self.calls_off.last().is_none_or(|&(_, on)| on != u64::MAX) {
            self.calls_off.push((at_ns, u64::MAX));
        }
        // An async copy before the off phase is not the one a sync after it waited for.
        for t in self.threads.values_mut() {
            t.last_async_copy = None;
        }
    }

    /// They are back on at `at_ns`.
    pub fn call_probes_on(&mut self, at_ns: u64) {
        if let Some(last) = self.calls_off.last_mut().filter(|(_, on)| *on == u64::MAX) {
            last.1 = at_ns.max(last.0);
        }
    }

    /// The share of `[start_ns, end_ns)` the call probes were on, when they were off for part
    /// of it; then every figure made from call records is scaled to the window, and the
    /// wakeups of the off phases (`off_wakes`) are left out and the rest scaled alike
    /// (module docs). None when they were on throughout.
    pub fn scale_sampled_calls(&mut self, start_ns: u64, end_ns: u64, off_wakes: &WakesOff) -> Option<f64> {
        let window_ns = end_ns.saturating_sub(start_ns);
        let off_ns: u64 = self.calls_off.iter().map(|&(off, on)| on.min(end_ns).saturating_sub(off.max(start_ns))).sum();
        if off_ns == 0 || off_ns >= window_ns {
            return None;
        }
        let on_ns = window_ns - off_ns;
        let by = window_ns as f64 / on_ns as f64;
        self.copies.scale(by);
        self.memsets.count = scale(self.memsets.count, by);
        self.memsets.bytes = scale(self.memsets.bytes, by);
        self.syncs.count = scale(self.syncs.count, by);
        self.syncs.wait_ns = scale(self.syncs.wait_ns, by);
        for (n, ns) in self.syncs.by_symbol.values_mut() {
            (*n, *ns) = (scale(*n, by), scale(*ns, by));
        }
        for t in self.threads.values_mut() {
            for n in [&mut t.copies, &mut t.syncs] {
                *n = scale(*n, by);
            }
            for ns in [
                &mut t.copy_ns,
                &mut t.sync_wait_ns,
                &mut t.pageable_copy_cost_ns,
                &mut t.sync_copy_cost_ns,
                &mut t.copy_wait_transfer_ns,
                &mut t.copy_sync_wait_ns,
            ] {
                *ns = scale(*ns, by);
            }
        }
        // Only the wakeups of threads that make the calls: another thread's are as exact as
        // they were (no probe of its tags them).
        let calling: std::collections::BTreeSet<u32> = self.threads.iter().filter(|(_, t)| t.copies + t.syncs > 0).map(|(&tid, _)| tid).collect();
        for w in self.wakes.iter_mut().filter(|w| calling.contains(&w.tid)) {
            let off = off_wakes.by_key.get(&(w.tid, w.waker_pid, w.stack_id, w.in_cuda)).copied().unwrap_or_default();
            w.count = scale(w.count.saturating_sub(off.count), by);
            w.ns = scale(w.ns.saturating_sub(off.ns), by).min(window_ns);
            w.blocked_ns = scale(w.blocked_ns.saturating_sub(off.blocked_ns), by).min(w.ns);
        }
        self.wakes.retain(|w| w.count > 0);
        Some(on_ns as f64 / window_ns as f64)
    }
}
