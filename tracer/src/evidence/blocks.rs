//! Memory at the tensor level: the blocks a framework's caching allocator hands out and takes
//! back (PyTorch's, probed in `libc10_cuda.so`: `gputrace_common::ALLOCATOR_SYMBOLS`). The
//! driver sees only the segments the allocator reserves (`memory.rs`); a tensor kept alive
//! across steps shows here first, as allocated bytes that grow while the reserve may not, and
//! each live block can be charged to the line that asked for it (`BlockSite`).

use std::collections::HashMap;

use gputrace_common::{CallEvent, Family, ProbeSpec};

use super::memory::TIMELINE_BUCKET_NS;

/// One block handed out and not yet given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    pub bytes: u64,
    pub tid: u32,
    /// When the allocation returned (its record's time): with the address, which block it
    /// is (the allocator hands the same address out again after a free).
    pub at_ns: u64,
}

/// The caching allocators' blocks, as their probes saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Blocks {
    /// Blocks handed out, and their bytes.
    pub count: u64,
    pub bytes: u64,
    /// Blocks given back.
    pub frees: u64,
    /// Frees of blocks handed out before tracing began (their size is unknown).
    pub unknown_frees: u64,
    /// Bytes in blocks handed out and not given back (seen while traced).
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    /// `live_bytes` over time: (time, bytes) at the end of each 100 ms bucket that changed it.
    pub timeline: Vec<(u64, u64)>,
    /// When the overhead budget took the allocator's probes off for good: the view is of the
    /// window up to then (records still arriving from closing links are left out).
    pub stopped_at_ns: Option<u64>,
    /// Blocks came from the cudaMallocAsync backend, whose pool reserves memory inside the
    /// driver (`cuMemAllocAsync` shows the blocks, not the pool's reserve).
    pub pooled: bool,
    live: HashMap<(u32, u64), LiveBlock>,
}

impl Blocks {
    /// Fold in one allocator call. Its time is the framework's host work, not a driver call:
    /// it stays out of the threads' CUDA time.
    pub(super) fn record(&mut self, spec: &ProbeSpec, call: &CallEvent) {
        let (pid, at) = (call.header.tgid, call.header.ts_ns);
        if self.stopped_at_ns.is_some_and(|s| at >= s) {
            return;
        }
        if spec.family == Family::Block {
            // The allocator's malloc returns nothing: it throws on failure, and a return seen
            // with no address written (an empty request) is no block.
            if call.out == 0 {
                return;
            }
            let size = spec.size_arg.map_or(0, |i| call.args[usize::from(i)]);
            self.pooled |= spec.symbol == "c10_async_malloc";
            self.count += 1;
            self.bytes = self.bytes.saturating_add(size);
            // The same address handed out twice without a free between: the free was not seen
            // (its probe missed it); the newer block replaces it.
            if let Some(old) = self.live.insert((pid, call.out), LiveBlock { bytes: size, tid: call.header.tid, at_ns: at }) {
                self.live_bytes = self.live_bytes.saturating_sub(old.bytes);
            }
            self.live_bytes = self.live_bytes.saturating_add(size);
            self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        } else {
            let addr = spec.addr_arg.map_or(0, |i| call.args[usize::from(i)]);
            if addr == 0 {
                return;
            }
            self.frees += 1;
            match self.live.remove(&(pid, addr)) {
                Some(b) => self.live_bytes = self.live_bytes.saturating_sub(b.bytes),
                None => self.unknown_frees += 1,
            }
        }
        match self.timeline.last_mut() {
            Some(last) if last.0 / TIMELINE_BUCKET_NS == at / TIMELINE_BUCKET_NS => *last = (at, self.live_bytes),
            _ => self.timeline.push((at, self.live_bytes)),
        }
    }

    /// The probes were taken off for good at `at_ns` (`--max-overhead`).
    pub fn stop(&mut self, at_ns: u64) {
        self.stopped_at_ns.get_or_insert(at_ns);
    }

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

    fn spec(program: &str) -> &'static ProbeSpec {
        PROBES.iter().find(|p| p.symbol == program).expect("an allocator probe")
    }

    fn call(program: &str, at: u64, args: [u64; 5], out: u64) -> (&'static ProbeSpec, CallEvent) {
        let s = spec(program);
        (s, CallEvent { header: EventHeader { kind: KIND_CALL, probe: s.id, tgid: 1, tid: 2, ts_ns: at }, start_ns: at, args, ret: 0, out })
    }

    #[test]
    fn live_bytes_follow_blocks_and_a_reused_address_is_a_new_block() {
        let mut b = Blocks::default();
        for (s, c) in [
            call("c10_native_malloc", 1, [0, 0, 0, 100, 0], 0xa),
            call("c10_native_malloc", 2, [0, 0, 0, 50, 0], 0xb),
            call("c10_native_free", 3, [0xa, 0, 0, 0, 0], 0),
            call("c10_native_malloc", TIMELINE_BUCKET_NS + 4, [0, 0, 0, 30, 0], 0xa),
            call("c10_native_raw_free", TIMELINE_BUCKET_NS + 5, [0, 0xdead, 0, 0, 0], 0),
            // No address written: no block.
            call("c10_native_malloc", TIMELINE_BUCKET_NS + 6, [0, 0, 0, 0, 0], 0),
        ] {
            b.record(s, &c);
        }
        assert_eq!((b.count, b.bytes, b.frees, b.unknown_frees), (3, 180, 2, 1));
        assert_eq!((b.live_bytes, b.peak_live_bytes), (80, 150));
        assert_eq!(b.timeline, vec![(3, 50), (TIMELINE_BUCKET_NS + 5, 80)]);
        assert_eq!(b.live_by_size(), vec![(16, 1, 30), (32, 1, 50)]);
        let mut live: Vec<(u64, u64, u64)> = b.live().map(|(_, a, l)| (a, l.bytes, l.at_ns)).collect();
        live.sort_unstable();
        assert_eq!(live, vec![(0xa, 30, TIMELINE_BUCKET_NS + 4), (0xb, 50, 2)]);
    }

    #[test]
    fn after_the_probes_went_off_nothing_more_is_counted() {
        let mut b = Blocks::default();
        let (s, c) = call("c10_native_malloc", 1, [0, 0, 0, 100, 0], 0xa);
        b.record(s, &c);
        b.stop(5);
        let (s, c) = call("c10_native_free", 6, [0xa, 0, 0, 0, 0], 0);
        b.record(s, &c);
        assert_eq!((b.live_bytes, b.frees), (100, 0));
    }

    #[test]
    fn the_async_backends_arguments_have_no_this() {
        let mut b = Blocks::default();
        let (s, c) = call("c10_async_malloc", 1, [0, 0, 64, 0, 0], 0xc);
        b.record(s, &c);
        let (s, c) = call("c10_async_free", 2, [0xc, 0, 0, 0, 0], 0);
        b.record(s, &c);
        assert_eq!((b.bytes, b.live_bytes, b.unknown_frees), (64, 0, 0));
    }
}
