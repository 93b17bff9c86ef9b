//! Bulk device-to-host copies, kept one by one (the most recent [`MAX_COPIES`]) and grouped
//! into bursts when analysed. A checkpoint (`torch.save` of a model and its optimizer) copies
//! every tensor to the host, one after another, with file writes in between; a training step
//! copies back a loss or a few metrics. Where the job's steps are known, a burst is the bulk
//! copies of one step (the step markers break bursts): a checkpoint stops the loop for as
//! long as it takes, however long its file writes. Without steps, copies closer than a gap
//! make a burst.

use std::collections::VecDeque;

/// A D2H copy this large is bulk (a tensor of a model, not a metric).
pub const BULK_BYTES: u64 = 1 << 20;
/// Bulk copies kept: the most recent.
const MAX_COPIES: usize = 65_536;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BulkCopy {
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub pageable: bool,
}

/// A run of bulk copies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Burst {
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    pub copies: u64,
    /// Of `bytes`, copied into pageable memory.
    pub pageable_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BulkCopies {
    copies: VecDeque<BulkCopy>,
}

impl BulkCopies {
    /// One D2H copy call, from `start_ns` to `end_ns` (ignored unless bulk).
    pub fn record(&mut self, start_ns: u64, end_ns: u64, bytes: u64, pageable: bool) {
        if bytes < BULK_BYTES {
            return;
        }
        if self.copies.len() == MAX_COPIES {
            self.copies.pop_front();
        }
        self.copies.push_back(BulkCopy { start_ns, end_ns, bytes, pageable });
    }

    /// The copies grouped into bursts: a copy joins the previous one's burst unless a time in
    /// `breaks` (ascending) lies between them or it starts more than `gap_ns` after.
    #[must_use]
    pub fn bursts(&self, breaks: &[u64], gap_ns: u64) -> Vec<Burst> {
        let mut out: Vec<Burst> = Vec::new();
        for c in &self.copies {
            let pageable_bytes = if c.pageable { c.bytes } else { 0 };
            let joins = out.last().is_some_and(|b| {
                let i = breaks.partition_point(|&t| t <= b.end_ns);
                let broken = breaks.get(i).is_some_and(|&t| t < c.start_ns);
                !broken && c.start_ns <= b.end_ns.saturating_add(gap_ns)
            });
            match out.last_mut() {
                Some(b) if joins => {
                    b.end_ns = b.end_ns.max(c.end_ns);
                    b.bytes += c.bytes;
                    b.copies += 1;
                    b.pageable_bytes += pageable_bytes;
                }
                _ => out.push(Burst { start_ns: c.start_ns, end_ns: c.end_ns, bytes: c.bytes, copies: 1, pageable_bytes }),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn copies() -> BulkCopies {
        let mut b = BulkCopies::default();
        b.record(0, 10 * MS, 64 << 20, true);
        b.record(60 * MS, 70 * MS, 64 << 20, true);
        b.record(80 * MS, 81 * MS, 4, true); // a loss read: not bulk
        b.record(200 * MS, 210 * MS, 64 << 20, false);
        b
    }

    #[test]
    fn without_steps_copies_closer_than_the_gap_make_one_burst() {
        let all = copies().bursts(&[], 100 * MS);
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].start_ns, all[0].end_ns, all[0].copies, all[0].pageable_bytes), (0, 70 * MS, 2, 128 << 20));
        assert_eq!(all[1].pageable_bytes, 0);
    }

    #[test]
    fn a_step_marker_between_copies_ends_a_burst_and_none_keeps_it_going() {
        assert_eq!(copies().bursts(&[30 * MS], u64::MAX).len(), 2, "a marker between the first two");
        assert_eq!(copies().bursts(&[5 * MS, 300 * MS], u64::MAX).len(), 1, "markers only inside and after");
    }
}
