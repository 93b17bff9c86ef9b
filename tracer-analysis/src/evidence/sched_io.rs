//! Host-side evidence: what each traced thread did with its time (scheduler tracepoints), and
//! the block I/O the traced tree issued.

use std::collections::BTreeMap;

use gputrace_common::{host::state, IoEvent, ThreadSched};

use crate::model::IoCounts;

/// One thread's time, by scheduler state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// The thread's process (tgid).
    pub pid: u32,
    /// Running on a CPU, ns.
    pub on_cpu_ns: u64,
    /// Runnable but not running: waiting for a CPU.
    pub runqueue_ns: u64,
    /// Uninterruptible sleep (`D`), mostly I/O.
    pub blocked_ns: u64,
    /// Interruptible sleep (`S`): waiting on a lock, a queue, a pipe, a timer.
    pub sleep_ns: u64,
    /// Switches out while still runnable (involuntary).
    pub preemptions: u64,
    /// Switches out by blocking or sleeping.
    pub voluntary_switches: u64,
}

impl SchedStats {
    /// Fold in the kernel's accounting; `open_until_ns` closes the interval of the state the
    /// thread is still in (the end of the window), or 0 for a thread that is gone.
    pub fn add(&mut self, s: &ThreadSched, open_until_ns: u64) {
        let mut spent = s.spent_ns;
        if open_until_ns > 0 {
            if let Some(slot) = spent.get_mut(s.state as usize) {
                *slot = slot.saturating_add(open_until_ns.saturating_sub(s.since_ns));
            }
        }
        // Saturating: a recording may carry any numbers.
        self.pid = s.tgid;
        self.on_cpu_ns = self.on_cpu_ns.saturating_add(spent[state::RUNNING as usize]);
        self.runqueue_ns = self.runqueue_ns.saturating_add(spent[state::RUNNABLE as usize]);
        self.blocked_ns = self.blocked_ns.saturating_add(spent[state::BLOCKED as usize]);
        self.sleep_ns = self.sleep_ns.saturating_add(spent[state::SLEEPING as usize]);
        self.preemptions = self.preemptions.saturating_add(s.preemptions);
        self.voluntary_switches = self.voluntary_switches.saturating_add(s.voluntary_switches);
    }

    /// Add another reading's figures (a thread seen in two segments, or exited and final).
    pub fn merge(&mut self, o: &Self) {
        self.pid = o.pid;
        self.on_cpu_ns += o.on_cpu_ns;
        self.runqueue_ns += o.runqueue_ns;
        self.blocked_ns += o.blocked_ns;
        self.sleep_ns += o.sleep_ns;
        self.preemptions += o.preemptions;
        self.voluntary_switches += o.voluntary_switches;
    }

    /// What accrued since `before`, an earlier reading of the same thread.
    #[must_use]
    pub fn since(&self, before: &Self) -> Self {
        Self {
            pid: self.pid,
            on_cpu_ns: self.on_cpu_ns.saturating_sub(before.on_cpu_ns),
            runqueue_ns: self.runqueue_ns.saturating_sub(before.runqueue_ns),
            blocked_ns: self.blocked_ns.saturating_sub(before.blocked_ns),
            sleep_ns: self.sleep_ns.saturating_sub(before.sleep_ns),
            preemptions: self.preemptions.saturating_sub(before.preemptions),
            voluntary_switches: self.voluntary_switches.saturating_sub(before.voluntary_switches),
        }
    }

    /// Time in all four states, ns: the thread's life as the scheduler accounted it.
    #[must_use]
    pub fn total_ns(&self) -> u64 {
        self.on_cpu_ns + self.runqueue_ns + self.blocked_ns + self.sleep_ns
    }
}

/// What a block request did, from the first letters of its `rwbs` string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// A read (`R`).
    Read,
    /// A write (`W`).
    Write,
    /// Discard, flush-only, secure erase and the rest.
    Other,
}

/// Decode `rwbs` (first four bytes, little-endian): `F` (flush) may come before the op letter.
#[must_use]
pub fn op_of(rwbs: u32) -> IoOp {
    for b in rwbs.to_le_bytes() {
        match b {
            b'R' => return IoOp::Read,
            b'W' => return IoOp::Write,
            b'F' => {}
            _ => return IoOp::Other,
        }
    }
    IoOp::Other
}

/// One process's, one device's or the whole job's block I/O: the counts the report shows as
/// they are, and the latency kept in whole nanoseconds so that sums stay exact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoTotals {
    /// Requests and bytes by operation, and errors.
    pub counts: IoCounts,
    /// Sum of request latencies (submission to completion).
    pub wait_ns: u64,
}

impl IoTotals {
    fn add(&mut self, op: IoOp, bytes: u64, latency_ns: u64, error: bool) {
        let c = &mut self.counts;
        match op {
            IoOp::Read => {
                c.reads += 1;
                c.read_bytes += bytes;
            }
            IoOp::Write => {
                c.writes += 1;
                c.write_bytes += bytes;
            }
            IoOp::Other => c.others += 1,
        }
        c.errors += u64::from(error);
        self.wait_ns += latency_ns;
    }
}

/// Number of log2 latency buckets: bucket `i` holds latencies in [2^i, 2^(i+1)) µs.
pub const LATENCY_BUCKETS: usize = 24;

/// Block I/O of the traced tree: totals, per process and per device, and a latency
/// histogram.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// The whole tree's.
    pub total: IoTotals,
    /// By the submitting thread's process (pid).
    pub by_process: BTreeMap<u32, IoTotals>,
    /// By device number (`dev_t` as the block tracepoints give it: major << 20 | minor).
    pub by_device: BTreeMap<u32, IoTotals>,
    /// Requests by latency: bucket `i` counts those from 2^i to 2^(i+1) µs, the first
    /// also anything shorter, the last anything longer.
    pub latency_log2_us: [u64; LATENCY_BUCKETS],
}

impl IoStats {
    /// Fold in one completed request.
    pub fn record(&mut self, e: &IoEvent) {
        let op = op_of(e.rwbs);
        let latency = e.header.ts_ns.saturating_sub(e.start_ns);
        let bytes = u64::from(e.bytes);
        let error = e.error != 0;
        self.total.add(op, bytes, latency, error);
        self.by_process.entry(e.header.tgid).or_default().add(op, bytes, latency, error);
        self.by_device.entry(e.dev).or_default().add(op, bytes, latency, error);
        let us = (latency / 1000).max(1);
        let bucket = us.ilog2() as usize;
        self.latency_log2_us[bucket.min(LATENCY_BUCKETS - 1)] += 1;
    }

    /// Latency quantile in microseconds (the upper edge of its bucket), if any I/O was seen.
    #[must_use]
    pub fn latency_quantile_us(&self, q: f64) -> Option<u64> {
        let n: u64 = self.latency_log2_us.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = ((n as f64 * q).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.latency_log2_us.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(1u64 << (i + 1));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::{EventHeader, KIND_IO};

    use super::*;

    fn rwbs(s: &str) -> u32 {
        let mut b = [0u8; 4];
        b[..s.len()].copy_from_slice(s.as_bytes());
        u32::from_le_bytes(b)
    }

    #[test]
    fn decodes_rwbs() {
        assert_eq!(op_of(rwbs("R")), IoOp::Read);
        assert_eq!(op_of(rwbs("RA")), IoOp::Read);
        assert_eq!(op_of(rwbs("WS")), IoOp::Write);
        assert_eq!(op_of(rwbs("FWS")), IoOp::Write);
        assert_eq!(op_of(rwbs("F")), IoOp::Other);
        assert_eq!(op_of(rwbs("D")), IoOp::Other);
        assert_eq!(op_of(0), IoOp::Other);
    }

    #[test]
    fn counts_bytes_per_process_and_latency() {
        let mut io = IoStats::default();
        for (pid, op, bytes, lat_us) in [(1, "R", 4096, 100), (1, "R", 8192, 3000), (2, "W", 512, 50)] {
            io.record(&IoEvent {
                header: EventHeader { kind: KIND_IO, probe: 0, tgid: pid, tid: pid, ts_ns: 1_000_000 + lat_us * 1000 },
                start_ns: 1_000_000,
                dev: 0x0fd0_0000,
                bytes,
                rwbs: rwbs(op),
                error: 0,
            });
        }
        assert_eq!((io.total.counts.reads, io.total.counts.read_bytes, io.total.counts.writes, io.total.counts.write_bytes), (2, 12288, 1, 512));
        assert_eq!(io.by_process[&1].counts.read_bytes, 12288);
        assert_eq!(io.total.wait_ns, 3_150_000);
        assert_eq!(io.latency_quantile_us(0.5), Some(128), "100 µs lies in [64, 128)");
        assert_eq!(io.latency_quantile_us(1.0), Some(4096));
        assert_eq!(IoStats::default().latency_quantile_us(0.5), None);
    }

    #[test]
    fn the_open_state_is_closed_at_the_window_end() {
        let mut s = SchedStats::default();
        s.add(&ThreadSched { tgid: 9, state: state::RUNNABLE, since_ns: 100, spent_ns: [50, 0, 0, 0], ..Default::default() }, 160);
        assert_eq!((s.on_cpu_ns, s.runqueue_ns), (50, 60));
        let mut gone = SchedStats::default();
        gone.add(&ThreadSched { tgid: 9, state: state::RUNNING, since_ns: 100, spent_ns: [50, 0, 0, 0], ..Default::default() }, 0);
        assert_eq!(gone.on_cpu_ns, 50, "a dead thread has no open interval");
    }
}
