//! The job's cumulative figures at moments of the window, so that an account can begin where
//! the job's start-up ends rather than where the window does (`detect::startup`). The
//! scheduler's figures are totals: without these marks, one-off waits of a start-up (libraries
//! read from disk, a helper process answering once) weigh in the account like every step's.
//!
//! Live, a mark is taken every 50 ms (`session::MARK_EVERY`); replayed, at every checkpoint (each
//! second). Only threads that made CUDA calls are kept (the account is of them), and at most
//! [`MAX_MARKS`] marks: when full, every other one goes and the spacing doubles, so a long
//! session keeps evenly spaced marks across all of it (a start-up is then known to that
//! spacing).

use gputrace_common::{Family, ThreadCounters, PROBES};

use super::{sched_io::SchedStats, Evidence, ThreadStats};

/// Marks kept at most (the spacing doubles when full).
pub const MAX_MARKS: usize = 256;

/// The time a thread spent in CUDA calls, by what the time account asks of it, so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaTimes {
    /// Inside synchronize calls, ns.
    pub sync_wait_ns: u64,
    /// Inside copy calls, ns.
    pub copy_ns: u64,
    /// Inside allocation, free, map and unmap calls, ns.
    pub alloc_ns: u64,
    /// The GPU queue known empty, ns (`ThreadStats::queue_idle_ns`).
    pub queue_idle_ns: u64,
    /// Pageable copies' staging, estimated, ns.
    pub pageable_copy_cost_ns: u64,
    /// Synchronous copies' transfer, estimated, ns.
    pub sync_copy_cost_ns: u64,
    /// The transfer part of the synchronizes after async bulk copies, estimated, ns.
    pub copy_wait_transfer_ns: u64,
}

impl CudaTimes {
    /// Thread `t`'s figures so far.
    #[must_use]
    pub fn of(t: &ThreadStats) -> Self {
        Self {
            sync_wait_ns: t.sync_wait_ns,
            copy_ns: t.copy_ns,
            alloc_ns: t.alloc_ns,
            queue_idle_ns: t.queue_idle_ns,
            pageable_copy_cost_ns: t.pageable_copy_cost_ns,
            sync_copy_cost_ns: t.sync_copy_cost_ns,
            copy_wait_transfer_ns: t.copy_wait_transfer_ns,
        }
    }

    /// What accrued since `before`, an earlier reading of the same thread.
    #[must_use]
    pub const fn since(&self, before: &Self) -> Self {
        Self {
            sync_wait_ns: self.sync_wait_ns.saturating_sub(before.sync_wait_ns),
            copy_ns: self.copy_ns.saturating_sub(before.copy_ns),
            alloc_ns: self.alloc_ns.saturating_sub(before.alloc_ns),
            queue_idle_ns: self.queue_idle_ns.saturating_sub(before.queue_idle_ns),
            pageable_copy_cost_ns: self.pageable_copy_cost_ns.saturating_sub(before.pageable_copy_cost_ns),
            sync_copy_cost_ns: self.sync_copy_cost_ns.saturating_sub(before.sync_copy_cost_ns),
            copy_wait_transfer_ns: self.copy_wait_transfer_ns.saturating_sub(before.copy_wait_transfer_ns),
        }
    }
}

/// One thread at a mark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadMark {
    /// The thread.
    pub tid: u32,
    /// The scheduler's accounting, its open state closed at the mark; None where the
    /// scheduler was not traced.
    pub sched: Option<SchedStats>,
    /// Its time in CUDA calls so far.
    pub cuda: CudaTimes,
    /// Kernel launches, graph launches and synchronizes, so far.
    pub kernels: u64,
    /// Graph launches so far.
    pub graphs: u64,
    /// Synchronizes so far.
    pub syncs: u64,
}

/// The figures at one moment (monotonic ns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// When the mark was taken.
    pub at_ns: u64,
    /// The threads that had made CUDA calls by then.
    pub threads: Vec<ThreadMark>,
    /// Bytes copied host to device so far.
    pub h2d_bytes: u64,
    /// Bytes copied device to host so far.
    pub d2h_bytes: u64,
    /// Device allocations and frees so far (`Evidence::allocs`).
    pub allocs: u64,
    /// Device frees so far.
    pub frees: u64,
}

impl Mark {
    /// Thread `tid` at this mark, if it had made CUDA calls by then.
    #[must_use]
    pub fn thread(&self, tid: u32) -> Option<&ThreadMark> {
        self.threads.iter().find(|t| t.tid == tid)
    }
}

/// Marks in time order, bounded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    marks: Vec<Mark>,
    /// One tick in `2^thinned` is marked.
    thinned: u32,
    ticks: u64,
}

impl Timeline {
    /// Whether this tick is to be marked (counts it).
    pub fn due(&mut self) -> bool {
        let due = self.ticks.trailing_zeros() >= self.thinned;
        self.ticks += 1;
        due
    }

    /// Add a mark, dropping it unless it is later than the last; when full, every other kept
    /// mark goes first.
    pub fn push(&mut self, mark: Mark) {
        if self.marks.last().is_some_and(|m| m.at_ns >= mark.at_ns) {
            return;
        }
        if self.marks.len() == MAX_MARKS {
            // Every other mark goes: the ticks marked from now on are those the kept
            // ones fall on (every `2^(thinned+1)`th).
            let mut i = 0;
            self.marks.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.thinned += 1;
        }
        self.marks.push(mark);
    }

    /// The last mark at or before `ns`.
    #[must_use]
    pub fn at_or_before(&self, ns: u64) -> Option<&Mark> {
        self.marks.iter().take_while(|m| m.at_ns <= ns).last()
    }

    /// Marks kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether no mark is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

/// Hits of probes of `family` in a thread's probe counters.
#[must_use]
pub fn family_hits(hits: &[u64], family: Family) -> u64 {
    PROBES.iter().filter(|p| p.family == family).filter_map(|p| hits.get(p.id as usize)).sum()
}

/// A thread's probe counters: the kernel's, or for a thread gone already what its exit
/// record folded in.
fn hits_of<'a>(counters: &'a [(u32, ThreadCounters)], tid: u32, t: &'a ThreadStats) -> &'a [u64] {
    counters.iter().find(|(c, _)| *c == tid).map_or(&t.hits[..], |(_, c)| &c.hits[..])
}

impl Evidence {
    /// Mark the CUDA threads' figures at `at_ns`: their scheduler accounting (`sched`, closed
    /// at `at_ns` already) and their launch counters (`counters`, the kernel's).
    pub fn mark_timeline(&mut self, at_ns: u64, sched: &[(u32, SchedStats)], counters: &[(u32, ThreadCounters)]) {
        let threads = self
            .threads
            .iter()
            .map(|(&tid, t)| ThreadMark {
                tid,
                sched: sched.iter().find(|(s, _)| *s == tid).map(|(_, s)| s.clone()),
                cuda: CudaTimes::of(t),
                kernels: family_hits(hits_of(counters, tid, t), Family::Launch),
                graphs: family_hits(hits_of(counters, tid, t), Family::GraphLaunch),
                syncs: t.syncs,
            })
            .collect();
        let mark = Mark {
            at_ns,
            threads,
            h2d_bytes: self.copies.h2d.bytes,
            d2h_bytes: self.copies.d2h.bytes,
            allocs: self.allocs.count,
            frees: self.allocs.frees,
        };
        self.timeline.push(mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(at_ns: u64) -> Mark {
        Mark { at_ns, ..Mark::default() }
    }

    #[test]
    fn the_last_mark_at_or_before_a_time_is_found() {
        let mut t = Timeline::default();
        for at in [100, 200, 300] {
            t.push(mark(at));
        }
        assert_eq!(t.at_or_before(99), None);
        assert_eq!(t.at_or_before(200).map(|m| m.at_ns), Some(200));
        assert_eq!(t.at_or_before(299).map(|m| m.at_ns), Some(200));
        assert_eq!(t.at_or_before(10_000).map(|m| m.at_ns), Some(300));
    }

    #[test]
    fn a_full_timeline_keeps_every_other_mark_and_marks_half_as_often() {
        let mut t = Timeline::default();
        let mut at = 0;
        for _ in 0..3 * MAX_MARKS {
            if t.due() {
                at += 1;
                t.push(mark(at * 10));
            } else {
                at += 1;
            }
        }
        assert!(t.len() <= MAX_MARKS && t.len() > MAX_MARKS / 2, "{}", t.len());
        // Marks stay in order and span the whole run, the first one kept.
        assert_eq!(t.marks[0].at_ns, 10);
        assert!(t.marks.windows(2).all(|w| w[0].at_ns < w[1].at_ns));
        assert!(t.marks.last().is_some_and(|m| m.at_ns > 2 * MAX_MARKS as u64 * 10));
        // Evenly spaced: every gap is the same once thinned.
        let gaps: std::collections::BTreeSet<u64> = t.marks.windows(2).map(|w| w[1].at_ns - w[0].at_ns).collect();
        assert_eq!(gaps.len(), 1, "{gaps:?}");
    }

    #[test]
    fn marks_out_of_order_are_dropped() {
        let mut t = Timeline::default();
        t.push(mark(200));
        t.push(mark(100));
        t.push(mark(200));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn cuda_times_since_an_earlier_reading_do_not_go_below_zero() {
        let later = CudaTimes { sync_wait_ns: 10, copy_ns: 5, ..CudaTimes::default() };
        let earlier = CudaTimes { sync_wait_ns: 4, copy_ns: 9, ..CudaTimes::default() };
        assert_eq!(later.since(&earlier), CudaTimes { sync_wait_ns: 6, copy_ns: 0, ..CudaTimes::default() });
    }
}
