//! Memory at the tensor level: the blocks a framework's caching allocator hands out and takes
//! back (PyTorch's, through its profiler hook in `libc10.so`: `gputrace_common::ALLOCATOR_SYMBOLS`),
//! with the allocator's own totals at each report. The
//! driver sees only the segments the allocator reserves (`memory.rs`); a tensor kept alive
//! across steps shows here first, as allocated bytes that grow while the reserve may not, and
//! each live block can be charged to the line that asked for it (`BlockSite`).

use std::collections::HashMap;

use gputrace_common::{CallEvent, Family, ProbeSpec};

use super::memory::TIMELINE_BUCKET_NS;

/// One block handed out and not yet given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    /// The block's size in bytes.
    pub bytes: u64,
    /// When the allocation returned (its record's time): with the address, which block it
    /// is (the allocator hands the same address out again after a free).
    pub at_ns: u64,
}

/// What a caching allocator says it holds, at one report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorTotals {
    /// In blocks handed out (`torch.cuda.memory_allocated()`).
    pub allocated_bytes: u64,
    /// In segments reserved (`torch.cuda.memory_reserved()`).
    pub reserved_bytes: u64,
}

/// The caching allocators' blocks, as their reports said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    /// Blocks handed out, and their bytes.
    pub count: u64,
    /// Their bytes, summed.
    pub bytes: u64,
    /// Blocks given back.
    pub frees: u64,
    /// Frees of blocks handed out before tracing began (their size is unknown).
    pub unknown_frees: u64,
    /// Bytes in blocks handed out and not given back (seen while traced).
    pub live_bytes: u64,
    /// The most `live_bytes` reached.
    pub peak_live_bytes: u64,
    /// `live_bytes` over time: (time, bytes) at the end of each 100 ms bucket that changed it.
    pub timeline: Vec<(u64, u64)>,
    /// When the overhead budget took the allocator's probes off for good: the view is of the
    /// window up to then (records still arriving from closing links are left out).
    pub stopped_at_ns: Option<u64>,
    /// The allocator's own figures at its latest report, by process and device index.
    allocator: std::collections::BTreeMap<(u32, u8), AllocatorTotals>,
    live: HashMap<(u32, u64), LiveBlock>,
    /// A process's teardown is no state of its job: as the interpreter exits, finalizers give
    /// every tensor back (PyTorch reported allocated 0 of 137 GiB reserved after the H200's
    /// fragmentation job printed 130 GiB in tensors, docs/validation.md, d36). So the
    /// allocator's figures at each process's last GPU work call (a copy, a sync, a memset)
    /// are kept, with the blocks it gave back since, and restored if the process exits.
    at_work: std::collections::BTreeMap<(u32, u8), AllocatorTotals>,
    since_work: HashMap<u32, Vec<(u64, LiveBlock)>>,
    last_work_ns: HashMap<u32, u64>,
}

/// Blocks given back after a process's last GPU work that are remembered, at most (beyond it,
/// a process's teardown is undone in part).
const MAX_SINCE_WORK: usize = 1 << 16;

impl Blocks {
    /// Fold in one allocator call. Its time is the framework's host work, not a driver call:
    /// it stays out of the threads' CUDA time.
    pub(super) fn record(&mut self, spec: &ProbeSpec, call: &CallEvent) {
        let (pid, at) = (call.header.tgid, call.header.ts_ns);
        if spec.family != Family::Block || self.stopped_at_ns.is_some_and(|s| at >= s) {
            return;
        }
        let [addr, size, total_allocated, total_reserved, device] = call.args;
        // c10::Device, two bytes in a register: the device type, then its index.
        let index = ((device >> 8) & 0xff) as u8;
        self.allocator.insert((pid, index), AllocatorTotals { allocated_bytes: total_allocated, reserved_bytes: total_reserved });
        let size = size as i64;
        if addr == 0 || size == 0 {
            return;
        }
        if size > 0 {
            let size = size.unsigned_abs();
            self.count += 1;
            self.bytes = self.bytes.saturating_add(size);
            // The same address handed out twice without a give-back between: that one was not
            // seen (a record lost); the newer block replaces it.
            if let Some(old) = self.live.insert((pid, addr), LiveBlock { bytes: size, at_ns: at }) {
                self.live_bytes = self.live_bytes.saturating_sub(old.bytes);
            }
            self.live_bytes = self.live_bytes.saturating_add(size);
            self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        } else {
            self.frees += 1;
            match self.live.remove(&(pid, addr)) {
                Some(b) => {
                    self.live_bytes = self.live_bytes.saturating_sub(b.bytes);
                    let since = self.since_work.entry(pid).or_default();
                    if since.len() < MAX_SINCE_WORK {
                        since.push((addr, b));
                    }
                }
                None => self.unknown_frees += 1,
            }
        }
        match self.timeline.last_mut() {
            Some(last) if last.0 / TIMELINE_BUCKET_NS == at / TIMELINE_BUCKET_NS => *last = (at, self.live_bytes),
            _ => self.timeline.push((at, self.live_bytes)),
        }
    }

    /// Process `pid` gave the GPU work at `at_ns` (a copy, a sync, a memset): what its
    /// allocator holds now is the job's, whatever it gives back later.
    pub(super) fn work(&mut self, pid: u32, at_ns: u64) {
        if self.allocator.is_empty() {
            return;
        }
        for (&key, &totals) in self.allocator.range((pid, 0)..=(pid, u8::MAX)) {
            self.at_work.insert(key, totals);
        }
        self.since_work.remove(&pid);
        self.last_work_ns.insert(pid, at_ns);
    }

    /// Process `pid` exited: what it gave back after its last GPU work was its teardown, and
    /// is undone (its blocks live again, its allocator's figures those at that work).
    pub(super) fn exited(&mut self, pid: u32) {
        let Some(&cut) = self.last_work_ns.get(&pid) else { return };
        for (addr, block) in self.since_work.remove(&pid).unwrap_or_default() {
            if self.live.insert((pid, addr), block).is_none() {
                self.live_bytes = self.live_bytes.saturating_add(block.bytes);
                self.frees = self.frees.saturating_sub(1);
            }
        }
        for (&key, &totals) in self.at_work.range((pid, 0)..=(pid, u8::MAX)) {
            self.allocator.insert(key, totals);
        }
        // The timeline ends at that work, with the bytes live then.
        while self.timeline.last().is_some_and(|&(t, _)| t > cut) {
            self.timeline.pop();
        }
        self.timeline.push((cut, self.live_bytes));
    }

    /// The allocator's own totals at its last report, summed over the job's processes and
    /// devices: (allocated, reserved). None before any report.
    #[must_use]
    pub fn allocator_totals(&self) -> Option<(u64, u64)> {
        (!self.allocator.is_empty()).then(|| {
            self.allocator.values().fold((0u64, 0u64), |(a, r), t| (a.saturating_add(t.allocated_bytes), r.saturating_add(t.reserved_bytes)))
        })
    }

    /// The probes were taken off for good at `at_ns` (`--max-overhead`).
    pub fn stop(&mut self, at_ns: u64) {
        self.stopped_at_ns.get_or_insert(at_ns);
    }

    /// Whether the overhead budget took the allocator's probes off (`stopped_at_ns`).
    #[must_use]
    pub const fn stopped(&self) -> bool {
        self.stopped_at_ns.is_some()
    }

    /// Whether any block was seen: the allocator's probes were attached and fired.
    #[must_use]
    pub fn seen(&self) -> bool {
        self.count > 0 || self.frees > 0
    }

    /// The live blocks by power-of-two size class (from, blocks, bytes), smallest first.
    #[must_use]
    pub fn live_by_size(&self) -> Vec<(u64, u64, u64)> {
        let mut classes: std::collections::BTreeMap<u64, (u64, u64)> = std::collections::BTreeMap::new();
        for b in self.live.values().filter(|b| b.bytes > 0) {
            let c = classes.entry(1 << b.bytes.ilog2()).or_default();
            c.0 += 1;
            c.1 = c.1.saturating_add(b.bytes);
        }
        classes.into_iter().map(|(from, (n, bytes))| (from, n, bytes)).collect()
    }

    /// The blocks live now, by process and address.
    pub fn live(&self) -> impl Iterator<Item = (u32, u64, &LiveBlock)> {
        self.live.iter().map(|(&(pid, addr), b)| (pid, addr, b))
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::{EventHeader, KIND_CALL, PROBES};

    use super::*;

    /// A report of `size` bytes (negative: given back) at `addr`, the allocator then holding
    /// `allocated` and `reserved` on device 0.
    fn report(at: u64, addr: u64, size: i64, allocated: u64, reserved: u64) -> CallEvent {
        let s = PROBES.iter().find(|p| p.symbol == "c10_report_memory").expect("the allocator probe");
        // c10::Device{CUDA (1), index 0}.
        CallEvent { header: EventHeader { kind: KIND_CALL, probe: s.id, tgid: 1, tid: 2, ts_ns: at }, start_ns: at, args: [addr, size as u64, allocated, reserved, 1], ret: 0, out: 0 }
    }

    fn fold(b: &mut Blocks, calls: &[CallEvent]) {
        let s = PROBES.iter().find(|p| p.symbol == "c10_report_memory").expect("the allocator probe");
        for c in calls {
            b.record(s, c);
        }
    }

    #[test]
    fn live_bytes_follow_blocks_and_a_reused_address_is_a_new_block() {
        let mut b = Blocks::default();
        fold(
            &mut b,
            &[
                report(1, 0xa, 100, 100, 1000),
                report(2, 0xb, 50, 150, 1000),
                report(3, 0xa, -100, 50, 1000),
                report(TIMELINE_BUCKET_NS + 4, 0xa, 30, 80, 1000),
                // A block from before the probes, given back.
                report(TIMELINE_BUCKET_NS + 5, 0xdead, -64, 16, 1000),
                // An empty request: no block.
                report(TIMELINE_BUCKET_NS + 6, 0, 0, 16, 1000),
            ],
        );
        assert_eq!((b.count, b.bytes, b.frees, b.unknown_frees), (3, 180, 2, 1));
        assert_eq!((b.live_bytes, b.peak_live_bytes), (80, 150));
        assert_eq!(b.timeline, vec![(3, 50), (TIMELINE_BUCKET_NS + 5, 80)]);
        assert_eq!(b.live_by_size(), vec![(16, 1, 30), (32, 1, 50)]);
        // The allocator's own figures, at its last report.
        assert_eq!(b.allocator_totals(), Some((16, 1000)));
        let mut live: Vec<(u64, u64, u64)> = b.live().map(|(_, a, l)| (a, l.bytes, l.at_ns)).collect();
        live.sort_unstable();
        assert_eq!(live, vec![(0xa, 30, TIMELINE_BUCKET_NS + 4), (0xb, 50, 2)]);
    }

    #[test]
    fn an_exiting_processs_teardown_is_undone_and_a_live_ones_frees_stand() {
        let teardown = |exits: bool| {
            let mut b = Blocks::default();
            fold(&mut b, &[report(1, 0xa, 100, 100, 1000), report(2, 0xb, 50, 150, 1000), report(3, 0xb, -50, 100, 1000)]);
            b.work(1, 4);
            // The interpreter's finalizers give everything back.
            fold(&mut b, &[report(TIMELINE_BUCKET_NS * 3, 0xa, -100, 0, 1000)]);
            if exits {
                b.exited(1);
            }
            b
        };
        let exited = teardown(true);
        assert_eq!((exited.live_bytes, exited.frees, exited.allocator_totals()), (100, 1, Some((100, 1000))), "as at the last work");
        assert_eq!(exited.live().map(|(_, a, _)| a).collect::<Vec<_>>(), vec![0xa]);
        assert_eq!(exited.timeline.last(), Some(&(4, 100)));
        let running = teardown(false);
        assert_eq!((running.live_bytes, running.frees, running.allocator_totals()), (0, 2, Some((0, 1000))), "a live process's frees are its job's");
    }

    #[test]
    fn after_the_probes_went_off_nothing_more_is_counted() {
        let mut b = Blocks::default();
        fold(&mut b, &[report(1, 0xa, 100, 100, 100)]);
        b.stop(5);
        fold(&mut b, &[report(6, 0xa, -100, 0, 100)]);
        assert_eq!((b.live_bytes, b.frees, b.allocator_totals()), (100, 0, Some((100, 100))));
    }
}
