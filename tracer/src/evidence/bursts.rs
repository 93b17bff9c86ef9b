//! Bulk device-to-host copies grouped into bursts: a checkpoint (`torch.save` of a model and
//! its optimizer) copies every tensor to the host, one after another, with file writes in
//! between; a training step copies back a loss or a few metrics. A burst is a run of bulk
//! D2H copies each starting within [`GAP_NS`] of the previous one's end.

use serde::{Deserialize, Serialize};

/// A D2H copy this large is bulk (a tensor of a model, not a metric).
pub const BULK_BYTES: u64 = 1 << 20;
/// Copies further apart than this start a new burst (a checkpoint writes each tensor to its
/// file before copying the next: tens of milliseconds for a large one).
pub const GAP_NS: u64 = 500_000_000;
/// Bursts kept: the most recent.
const MAX_BURSTS: usize = 4096;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Burst {
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub copies: u64,
    /// Of `bytes`, copied into pageable memory.
    pub pageable_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bursts {
    pub done: std::collections::VecDeque<Burst>,
    open: Option<Burst>,
}

impl Bursts {
    /// One D2H copy call, from `start_ns` to `end_ns`.
    pub fn record(&mut self, start_ns: u64, end_ns: u64, bytes: u64, pageable: bool) {
        if bytes < BULK_BYTES {
            return;
        }
        let pageable_bytes = if pageable { bytes } else { 0 };
        match &mut self.open {
            Some(b) if start_ns <= b.end_ns.saturating_add(GAP_NS) => {
                b.end_ns = b.end_ns.max(end_ns);
                b.bytes += bytes;
                b.copies += 1;
                b.pageable_bytes += pageable_bytes;
            }
            _ => {
                self.close();
                self.open = Some(Burst { start_ns, end_ns, bytes, copies: 1, pageable_bytes });
            }
        }
    }

    fn close(&mut self) {
        if let Some(b) = self.open.take() {
            if self.done.len() == MAX_BURSTS {
                self.done.pop_front();
            }
            self.done.push_back(b);
        }
    }

    /// Every burst, the open one included.
    #[must_use]
    pub fn all(&self) -> Vec<Burst> {
        self.done.iter().copied().chain(self.open).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_close_together_make_one_burst_and_small_ones_none() {
        let mut b = Bursts::default();
        let ms = 1_000_000;
        b.record(0, 10 * ms, 64 << 20, true);
        b.record(60 * ms, 70 * ms, 64 << 20, true);
        b.record(80 * ms, 81 * ms, 4, true); // a loss read: not bulk
        b.record(2_000 * ms, 2_010 * ms, 64 << 20, false);
        let all = b.all();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].start_ns, all[0].end_ns, all[0].copies, all[0].pageable_bytes), (0, 70 * ms, 2, 128 << 20));
        assert_eq!(all[1].pageable_bytes, 0);
    }
}
