//! Where the main (launching) thread's wall time went: one partition of the window into
//! buckets that never overlap, so fractions add up to exactly 1.
//!
//! The sources overlap — a thread inside a synchronize may be spinning on a CPU, sleeping, or
//! preempted — so CUDA call time is taken first (what the thread was doing), scheduler time
//! outside those calls next, and the rest is launching and other host work. Where the sources
//! add up to more than the window (a preempted thread inside a sync is counted by both), the
//! scheduler buckets are trimmed to fit.

use super::{host::SchedStats, ThreadStats};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeAccount {
    pub window_ns: u64,
    /// Blocked in synchronize calls: the host waits for the GPU.
    pub waiting_on_gpu_ns: u64,
    /// Inside copy calls (staging pageable memory, synchronous copies).
    pub in_copies_ns: u64,
    /// Inside device allocation, free and mapping calls.
    pub allocating_ns: u64,
    /// Runnable, not running: waiting for a CPU.
    pub waiting_for_cpu_ns: u64,
    /// Uninterruptible sleep, mostly disk.
    pub io_wait_ns: u64,
    /// Interruptible sleep outside CUDA calls: a queue, a lock, a timer (a data loader).
    pub sleeping_ns: u64,
    /// Everything else: on a CPU, launching kernels and running the program's own code.
    pub launching_and_host_ns: u64,
}

impl TimeAccount {
    /// The account of one thread over a window of `window_ns`; `sched` is None without
    /// scheduler evidence (then all non-CUDA time is "launching and host").
    #[must_use]
    pub fn of(t: &ThreadStats, sched: Option<&SchedStats>, window_ns: u64) -> Self {
        let mut left = window_ns;
        let mut take = |ns: u64| {
            let got = ns.min(left);
            left -= got;
            got
        };
        let waiting_on_gpu_ns = take(t.sync_wait_ns);
        let in_copies_ns = take(t.copy_ns);
        let allocating_ns = take(t.alloc_ns);
        let cuda_ns = t.sync_wait_ns + t.copy_ns + t.alloc_ns;
        let (waiting_for_cpu_ns, io_wait_ns, sleeping_ns) = match sched {
            // A CUDA call's own waiting shows as sleep or blocked time too; only what is left
            // after the CUDA buckets counts.
            Some(s) => (take(s.runqueue_ns), take(s.blocked_ns), take(s.sleep_ns.saturating_sub(cuda_ns))),
            None => (0, 0, 0),
        };
        Self {
            window_ns,
            waiting_on_gpu_ns,
            in_copies_ns,
            allocating_ns,
            waiting_for_cpu_ns,
            io_wait_ns,
            sleeping_ns,
            launching_and_host_ns: left,
        }
    }

    /// The buckets in report order, with their names.
    #[must_use]
    pub fn buckets(&self) -> [(&'static str, u64); 7] {
        [
            ("launching_and_host", self.launching_and_host_ns),
            ("waiting_on_gpu", self.waiting_on_gpu_ns),
            ("in_copies", self.in_copies_ns),
            ("allocating", self.allocating_ns),
            ("waiting_for_cpu", self.waiting_for_cpu_ns),
            ("io_wait", self.io_wait_ns),
            ("sleeping", self.sleeping_ns),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(sync: u64, copy: u64, alloc: u64) -> ThreadStats {
        let mut t = ThreadStats::new(1);
        t.sync_wait_ns = sync;
        t.copy_ns = copy;
        t.alloc_ns = alloc;
        t
    }

    #[test]
    fn the_buckets_partition_the_window() {
        let s = SchedStats { pid: 1, on_cpu_ns: 500, runqueue_ns: 100, blocked_ns: 50, sleep_ns: 350, ..SchedStats::default() };
        let a = TimeAccount::of(&thread(200, 100, 0), Some(&s), 1000);
        assert_eq!(a.waiting_on_gpu_ns, 200);
        assert_eq!(a.in_copies_ns, 100);
        assert_eq!(a.waiting_for_cpu_ns, 100);
        assert_eq!(a.io_wait_ns, 50);
        assert_eq!(a.sleeping_ns, 50, "350 asleep of which 300 inside CUDA calls");
        assert_eq!(a.launching_and_host_ns, 500);
        assert_eq!(a.buckets().iter().map(|(_, ns)| ns).sum::<u64>(), 1000);
    }

    #[test]
    fn overlapping_sources_are_trimmed_to_the_window() {
        let s = SchedStats { pid: 1, runqueue_ns: 900, blocked_ns: 900, sleep_ns: 900, ..SchedStats::default() };
        let a = TimeAccount::of(&thread(600, 300, 300), Some(&s), 1000);
        assert_eq!(a.buckets().iter().map(|(_, ns)| ns).sum::<u64>(), 1000);
        assert_eq!((a.waiting_on_gpu_ns, a.in_copies_ns, a.allocating_ns, a.launching_and_host_ns), (600, 300, 100, 0));
    }

    #[test]
    fn without_scheduler_evidence_the_rest_is_host_work() {
        let a = TimeAccount::of(&thread(100, 0, 0), None, 1000);
        assert_eq!((a.waiting_on_gpu_ns, a.launching_and_host_ns), (100, 900));
    }
}
