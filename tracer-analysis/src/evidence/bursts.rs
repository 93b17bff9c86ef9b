//! Bulk device-to-host copies grouped into bursts. A checkpoint (`torch.save` of a model and
//! its optimizer) copies every tensor to the host, one after another, each followed by its
//! file write, and launches nothing until it is done; a training step launches kernels. So a
//! burst is a run of bulk D2H copies with no kernel launch between them, and it lasts until
//! the first launch after it: the time the loop stood still.
//!
//! Launches are not events, but the first launch after a draining call is (`IdleEnd`), and
//! a bulk copy into pageable memory drains the queue, as does the sync that follows a copy
//! into pinned memory. Where neither happens, a pause of [`GAP_NS`] also ends a burst.

use std::collections::VecDeque;

/// A D2H copy this large is bulk (a tensor of a model, not a metric).
pub const BULK_BYTES: u64 = 1 << 20;
/// Copies further apart than this are separate bursts even without a launch seen between.
pub const GAP_NS: u64 = 2_000_000_000;
/// Bursts kept: the most recent.
const MAX_BURSTS: usize = 4096;

/// A run of bulk copies, and the time the loop stood still for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Burst {
    /// The thread that made the copies.
    pub tid: u32,
    /// When the burst's first copy began (monotonic ns).
    pub start_ns: u64,
    /// The first launch after the burst, or its last copy's end where none was seen.
    pub end_ns: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Bulk copies in the burst.
    pub copies: u64,
    /// Of `bytes`, copied into pageable memory.
    pub pageable_bytes: u64,
}

/// Each thread's bursts of bulk device-to-host copies: the open ones, and the most recent
/// 4096 closed ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bursts {
    done: VecDeque<Burst>,
    /// Bursts still open (no launch seen since), one per thread at most.
    open: Vec<Burst>,
}

impl Bursts {
    /// A D2H copy by thread `tid` from `start_ns` to `end_ns` (ignored unless bulk).
    pub fn copy(&mut self, tid: u32, start_ns: u64, end_ns: u64, bytes: u64, pageable: bool) {
        if bytes < BULK_BYTES {
            return;
        }
        let pageable_bytes = if pageable { bytes } else { 0 };
        if let Some(i) = self.open.iter().position(|b| b.tid == tid) {
            if start_ns <= self.open[i].end_ns.saturating_add(GAP_NS) {
                let b = &mut self.open[i];
                b.end_ns = b.end_ns.max(end_ns);
                b.bytes += bytes;
                b.copies += 1;
                b.pageable_bytes += pageable_bytes;
                return;
            }
            let b = self.open.swap_remove(i);
            self.close(b);
        }
        self.open.push(Burst { tid, start_ns, end_ns, bytes, copies: 1, pageable_bytes });
    }

    /// Thread `tid` launched a kernel at `at_ns` (the first launch after a draining call):
    /// its open burst, if any, ends there.
    pub fn launch(&mut self, tid: u32, at_ns: u64) {
        if let Some(i) = self.open.iter().position(|b| b.tid == tid) {
            let mut b = self.open.swap_remove(i);
            b.end_ns = b.end_ns.max(at_ns);
            self.close(b);
        }
    }

    fn close(&mut self, b: Burst) {
        if self.done.len() == MAX_BURSTS {
            self.done.pop_front();
        }
        self.done.push_back(b);
    }

    /// Every burst, the open ones included, by start time.
    #[must_use]
    pub fn all(&self) -> Vec<Burst> {
        let mut all: Vec<Burst> = self.done.iter().chain(&self.open).copied().collect();
        all.sort_by_key(|b| b.start_ns);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn copies_without_a_launch_between_are_one_burst_which_lasts_until_the_next_launch() {
        let mut b = Bursts::default();
        b.copy(7, 0, 10 * MS, 64 << 20, true);
        b.copy(7, 60 * MS, 70 * MS, 64 << 20, true);
        b.copy(7, 80 * MS, 81 * MS, 4, true); // a loss read: not bulk
        b.launch(7, 120 * MS);
        b.copy(7, 200 * MS, 210 * MS, 64 << 20, false);
        let all = b.all();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].start_ns, all[0].end_ns, all[0].copies, all[0].pageable_bytes), (0, 120 * MS, 2, 128 << 20));
        assert_eq!((all[1].end_ns, all[1].pageable_bytes), (210 * MS, 0), "still open");
    }

    #[test]
    fn threads_keep_their_own_bursts_and_a_long_pause_ends_one() {
        let mut b = Bursts::default();
        b.copy(1, 0, MS, 2 << 20, false);
        b.copy(2, 0, MS, 2 << 20, false);
        b.launch(2, 5 * MS);
        b.copy(1, 10 * MS, 11 * MS, 2 << 20, false);
        b.copy(1, 11 * MS + GAP_NS + 1, 12 * MS + GAP_NS, 2 << 20, false);
        let all = b.all();
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(all.iter().filter(|x| x.tid == 1).map(|x| x.copies).collect::<Vec<_>>(), vec![2, 1]);
    }
}
