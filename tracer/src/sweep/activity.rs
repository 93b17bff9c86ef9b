//! What each process did with CUDA during the window (pure; unit-tested on synthetic
//! counters and events).
//!
//! Two sources, as in a trace: the kernel's per-thread hit counters (`THREADS`, exact, one
//! slot per probe) give the number of calls of each kind; the call records from the ring
//! buffer give times, bytes and results. Launches write no record (docs/facts.md: they are the hot
//! path), so the last time a process launched is taken from the counters, polled every
//! `POLL`: a process whose counters moved since the previous poll was active at this poll.

use std::collections::{BTreeMap, HashMap};

use gputrace_common::{cuda::slot, spec_of, CallEvent, Family, ThreadCounters, PROBE_SLOTS};

/// Calls made in the window, by kind, from the hit counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    pub kernels: u64,
    pub graphs: u64,
    pub copies: u64,
    pub memsets: u64,
    pub syncs: u64,
    pub allocs: u64,
    pub frees: u64,
    pub contexts: u64,
    /// Pinned host memory, virtual-memory mapping and caching-allocator block calls.
    pub other: u64,
}

impl Calls {
    #[must_use]
    pub fn total(&self) -> u64 {
        self.kernels + self.graphs + self.copies + self.memsets + self.syncs + self.allocs + self.frees + self.contexts + self.other
    }

    fn add(&mut self, family: Family, hits: u64) {
        let slot = match family {
            Family::Launch => &mut self.kernels,
            Family::GraphLaunch => &mut self.graphs,
            Family::Copy => &mut self.copies,
            Family::Memset => &mut self.memsets,
            Family::Sync => &mut self.syncs,
            Family::Alloc => &mut self.allocs,
            Family::Free => &mut self.frees,
            Family::Context => &mut self.contexts,
            Family::HostPin | Family::HostUnpin | Family::Map | Family::Unmap | Family::Block | Family::Collective | Family::Comm => &mut self.other,
        };
        *slot += hits;
    }
}

/// Sum the per-thread counters into per-process calls (the entry names its process).
#[must_use]
pub fn calls_by_process(counters: &[(u32, ThreadCounters)]) -> BTreeMap<u32, Calls> {
    let mut out: BTreeMap<u32, Calls> = BTreeMap::new();
    for (_, c) in counters {
        let calls = out.entry(c.tgid).or_default();
        for (id, &hits) in c.hits.iter().enumerate().filter(|(_, h)| **h > 0) {
            if let Some(spec) = spec_of(id as u32) {
                calls.add(spec.family, hits);
            }
        }
    }
    out
}

/// A context call seen in the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextSeen {
    pub symbol: &'static str,
    pub tid: u32,
    /// Return time, on the monotonic clock.
    pub at_ns: u64,
    /// The `CUresult`, 0 on success.
    pub result: u64,
}

/// At most this many context calls are kept per process: a process that creates contexts in
/// a loop must not grow the report without bound.
pub const MAX_CONTEXTS: usize = 16;

/// Figures from the call records of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timed {
    pub sync_wait_ns: u64,
    pub copy_bytes: u64,
    /// Device memory allocated in the window, and the part of it freed again in the window.
    pub allocated_bytes: u64,
    pub freed_bytes: u64,
    pub contexts: Vec<ContextSeen>,
    /// Blocks allocated in the window and not freed yet: address → size.
    live: HashMap<u64, u64>,
    /// Wall time each thread spent inside synchronizing calls and synchronous copies.
    pub gpu_wait_by_thread: BTreeMap<u32, u64>,
    /// Wall time each thread spent inside asynchronous copies: a copy from pinned memory
    /// returns at once, one from pageable memory is staged by the host first.
    pub copy_wait_by_thread: BTreeMap<u32, u64>,
}

impl Timed {
    /// Device memory allocated in the window and still held at its end. Memory a process
    /// allocated before the window is invisible here (NVML is the only source for it).
    #[must_use]
    pub fn held_bytes(&self) -> u64 {
        self.live.values().sum()
    }
}

/// The window's CUDA activity of every process seen.
#[derive(Debug, Default)]
pub struct CudaActivity {
    /// Calls per process as of the latest poll.
    pub calls: BTreeMap<u32, Calls>,
    pub timed: BTreeMap<u32, Timed>,
    /// Last time each process was seen calling CUDA (monotonic ns).
    pub last_ns: BTreeMap<u32, u64>,
    /// Hits per probe id over all processes, as of the latest poll.
    pub hits: BTreeMap<u32, u64>,
    /// The threads that launched kernels or synchronized, as of the latest poll: thread →
    /// process (the critical path's threads, `job`).
    pub launching: BTreeMap<u32, u32>,
    /// Polls taken, and by process the polls at which its counters had moved since the one
    /// before: whether it called CUDA all through the window or in a burst.
    pub polls: u32,
    pub polls_calling: BTreeMap<u32, u32>,
    pub decode_errors: u64,
}

impl CudaActivity {
    /// Take a poll of the hit counters made at `now_ns`.
    pub fn observe(&mut self, now_ns: u64, counters: &[(u32, ThreadCounters)]) {
        let calls = calls_by_process(counters);
        self.polls += 1;
        for (pid, c) in &calls {
            let before = self.calls.get(pid).map_or(0, Calls::total);
            if c.total() > before {
                let last = self.last_ns.entry(*pid).or_default();
                *last = (*last).max(now_ns);
                *self.polls_calling.entry(*pid).or_default() += 1;
            }
        }
        // Counters only grow (a sweep never deletes an entry), so the latest poll holds all.
        self.calls = calls;
        let mut hits = BTreeMap::new();
        for (_, c) in counters {
            for (id, &h) in c.hits.iter().enumerate().take(PROBE_SLOTS).filter(|(_, h)| **h > 0) {
                *hits.entry(id as u32).or_default() += h;
            }
        }
        self.hits = hits;
        self.launching = counters
            .iter()
            .filter(|(_, c)| {
                c.hits.iter().enumerate().any(|(id, &h)| h > 0 && spec_of(id as u32).is_some_and(|s| matches!(s.family, Family::Launch | Family::GraphLaunch | Family::Sync) || s.sync_api))
            })
            .map(|(tid, c)| (*tid, c.tgid))
            .collect();
    }

    /// The launching threads of process `pid`.
    pub fn launching_threads(&self, pid: u32) -> impl Iterator<Item = u32> + '_ {
        self.launching.iter().filter(move |(_, p)| **p == pid).map(|(t, _)| *t)
    }

    /// Fold one call record in.
    pub fn apply(&mut self, call: &CallEvent) {
        let h = &call.header;
        let Some(spec) = spec_of(h.probe) else {
            self.decode_errors += 1;
            return;
        };
        let last = self.last_ns.entry(h.tgid).or_default();
        *last = (*last).max(h.ts_ns);
        let t = self.timed.entry(h.tgid).or_default();
        let inside = h.ts_ns.saturating_sub(call.start_ns);
        if spec.family == Family::Sync || spec.sync_api {
            *t.gpu_wait_by_thread.entry(h.tid).or_default() += inside;
        } else if spec.family == Family::Copy {
            *t.copy_wait_by_thread.entry(h.tid).or_default() += inside;
        }
        let arg = |i: Option<u8>| i.and_then(|i| call.args.get(usize::from(i)).copied());
        match spec.family {
            Family::Sync => t.sync_wait_ns += h.ts_ns.saturating_sub(call.start_ns),
            Family::Copy => {
                let bytes = if spec.copy.from_struct() { call.args[slot::BYTES] } else { arg(spec.size_arg).unwrap_or(0) };
                t.copy_bytes = t.copy_bytes.saturating_add(bytes);
            }
            Family::Alloc if call.ret == 0 => {
                let size = arg(spec.size_arg).unwrap_or(0);
                t.allocated_bytes = t.allocated_bytes.saturating_add(size);
                t.live.insert(call.out, size);
            }
            Family::Free if call.ret == 0 => {
                if let Some(size) = arg(spec.addr_arg).and_then(|a| t.live.remove(&a)) {
                    t.freed_bytes += size;
                }
            }
            Family::Context if t.contexts.len() < MAX_CONTEXTS => {
                t.contexts.push(ContextSeen { symbol: spec.symbol, tid: h.tid, at_ns: h.ts_ns, result: call.ret });
            }
            _ => {}
        }
    }

    /// Processes that made any probed CUDA call in the window.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.calls.iter().filter(|(_, c)| c.total() > 0).map(|(p, _)| *p).chain(self.timed.keys().copied())
    }
}

/// Each thread's hits since `baseline` (the counters at the window's start, by thread): a
/// continuous sweep keeps its probes, and so its counters, from one window to the next. A
/// thread the baseline lacks is new: all its hits are the window's. A thread id the kernel
/// reused after a thread of the baseline exited counts from zero where its hits fall below.
#[must_use]
pub fn since(counters: &[(u32, ThreadCounters)], baseline: &BTreeMap<u32, ThreadCounters>) -> Vec<(u32, ThreadCounters)> {
    counters
        .iter()
        .map(|(tid, c)| {
            let Some(before) = baseline.get(tid).filter(|b| b.tgid == c.tgid) else { return (*tid, *c) };
            let mut delta = *c;
            for (now, then) in delta.hits.iter_mut().zip(&before.hits) {
                *now = now.saturating_sub(*then);
            }
            (*tid, delta)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use gputrace_common::{EventHeader, KIND_CALL};

    use super::*;

    fn id(symbol: &str) -> u32 {
        gputrace_common::PROBES.iter().find(|p| p.symbol == symbol).map(|p| p.id).expect("known symbol")
    }

    fn thread(tgid: u32, hits: &[(&str, u64)]) -> ThreadCounters {
        let mut c = ThreadCounters { tgid, ..ThreadCounters::ZERO };
        for (symbol, n) in hits {
            c.hits[id(symbol) as usize] = *n;
        }
        c
    }

    fn call(tgid: u32, symbol: &str, args: [u64; 5], ret: u64, out: u64, start_ns: u64, ts_ns: u64) -> CallEvent {
        CallEvent { header: EventHeader { kind: KIND_CALL, probe: id(symbol), tgid, tid: tgid, ts_ns }, start_ns, args, ret, out }
    }

    #[test]
    fn a_window_counts_the_hits_since_its_baseline() {
        let before = thread(10, &[("cuLaunchKernel", 100), ("cuCtxSynchronize_v2", 5)]);
        let now = thread(10, &[("cuLaunchKernel", 130), ("cuCtxSynchronize_v2", 5)]);
        let reused = thread(11, &[("cuLaunchKernel", 3)]);
        let baseline: BTreeMap<u32, ThreadCounters> = [(1, before), (2, thread(12, &[("cuLaunchKernel", 50)]))].into();
        let fresh = thread(10, &[("cuLaunchKernel", 7)]);
        let d = since(&[(1, now), (2, reused), (3, fresh)], &baseline);
        let calls = calls_by_process(&d);
        // Thread 1: 30 launches, no sync; thread 2 is another process's now; thread 3 is new.
        assert_eq!(calls[&10].kernels, 37);
        assert_eq!(calls[&10].syncs, 0);
        assert_eq!(calls[&11].kernels, 3);
        let mut a = CudaActivity::default();
        a.observe(1_000, &d);
        assert_eq!(a.last_ns.get(&10), Some(&1_000));
        // A window in which a process's counters did not move does not date it.
        let mut quiet = CudaActivity::default();
        quiet.observe(2_000, &since(&[(1, now)], &[(1, now)].into()));
        assert!(quiet.last_ns.is_empty() && quiet.pids().next().is_none());
    }

    #[test]
    fn threads_add_up_per_process_and_polls_date_the_activity() {
        let mut a = CudaActivity::default();
        let t1 = thread(10, &[("cuLaunchKernel", 5), ("cuStreamSynchronize", 1)]);
        let t2 = thread(10, &[("cuLaunchKernelEx", 3), ("cuMemcpyHtoDAsync_v2", 2)]);
        let t3 = thread(20, &[("cuGraphLaunch", 4), ("cuMemAlloc_v2", 1), ("cuDevicePrimaryCtxRetain", 1)]);
        a.observe(1_000, &[(11, t1), (12, t2), (21, t3)]);
        let p10 = a.calls[&10];
        assert_eq!((p10.kernels, p10.syncs, p10.copies, p10.total()), (8, 1, 2, 11));
        let p20 = a.calls[&20];
        assert_eq!((p20.graphs, p20.allocs, p20.contexts, p20.kernels), (4, 1, 1, 0));
        assert_eq!(a.last_ns[&10], 1_000);
        // Only process 10 moves before the next poll.
        let t1 = thread(10, &[("cuLaunchKernel", 6), ("cuStreamSynchronize", 1)]);
        a.observe(2_000, &[(11, t1), (12, t2), (21, t3)]);
        assert_eq!((a.last_ns[&10], a.last_ns[&20]), (2_000, 1_000));
        assert_eq!(a.hits[&id("cuLaunchKernel")], 6);
        let mut pids: Vec<u32> = a.pids().collect();
        pids.dedup();
        assert_eq!(pids, [10, 20]);
    }

    #[test]
    fn records_give_bytes_waits_contexts_and_memory_allocated_in_the_window() {
        let mut a = CudaActivity::default();
        a.apply(&call(7, "cuStreamSynchronize", [0; 5], 0, 0, 100, 600));
        a.apply(&call(7, "cuMemcpyHtoDAsync_v2", [0xd000, 0x1000, 4096, 0, 0], 0, 0, 700, 800));
        a.apply(&call(7, "cuMemAlloc_v2", [0x7ff0, 1 << 20, 0, 0, 0], 0, 0xa000, 900, 950));
        a.apply(&call(7, "cuMemAlloc_v2", [0x7ff0, 2 << 20, 0, 0, 0], 0, 0xb000, 960, 970));
        a.apply(&call(7, "cuMemFree_v2", [0xa000, 0, 0, 0, 0], 0, 0, 980, 990));
        // A free of memory allocated before the window changes nothing we can know.
        a.apply(&call(7, "cuMemFree_v2", [0xc000, 0, 0, 0, 0], 0, 0, 991, 992));
        // A failed allocation holds nothing.
        a.apply(&call(7, "cuMemAlloc_v2", [0x7ff0, 8 << 30, 0, 0, 0], 2, 0, 993, 994));
        a.apply(&call(7, "cuDevicePrimaryCtxRetain", [0x7ff8, 0, 0, 0, 0], 0, 0x1000, 995, 999));
        let t = &a.timed[&7];
        assert_eq!(t.sync_wait_ns, 500);
        assert_eq!(t.copy_bytes, 4096);
        assert_eq!((t.allocated_bytes, t.freed_bytes, t.held_bytes()), (3 << 20, 1 << 20, 2 << 20));
        assert_eq!(t.contexts, [ContextSeen { symbol: "cuDevicePrimaryCtxRetain", tid: 7, at_ns: 999, result: 0 }]);
        assert_eq!(a.last_ns[&7], 999);
    }

    #[test]
    fn unknown_probe_ids_and_context_floods_are_bounded() {
        let mut a = CudaActivity::default();
        let mut bad = call(1, "cuMemAlloc_v2", [0; 5], 0, 0, 0, 1);
        // An id no probe has (82 and 83 are free).
        bad.header.probe = 83;
        a.apply(&bad);
        bad.header.probe = u32::MAX;
        a.apply(&bad);
        assert_eq!(a.decode_errors, 2);
        for i in 0..100 {
            a.apply(&call(2, "cuCtxCreate_v2", [0; 5], 0, 0, i, i + 1));
        }
        assert_eq!(a.timed[&2].contexts.len(), MAX_CONTEXTS);
    }
}
