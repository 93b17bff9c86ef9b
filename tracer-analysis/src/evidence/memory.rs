//! Device allocations, pinned host memory and context calls.

use std::collections::BTreeMap;

use gputrace_common::{cuda::slot, CallEvent, Family, ProbeSpec};

/// `CUDA_ERROR_OUT_OF_MEMORY` (cuda.h).
pub const CUDA_ERROR_OUT_OF_MEMORY: u64 = 2;

/// Address ranges per process, for "does this pointer lie in a known block".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Ranges(BTreeMap<(u32, u64), u64>);

impl Ranges {
    fn insert(&mut self, pid: u32, start: u64, len: u64) {
        self.0.insert((pid, start), len);
    }

    fn remove(&mut self, pid: u32, start: u64) -> Option<u64> {
        self.0.remove(&(pid, start))
    }

    fn contains(&self, pid: u32, addr: u64) -> bool {
        self.0.range(..=(pid, addr)).next_back().is_some_and(|(&(p, start), &len)| p == pid && addr < start.saturating_add(len.max(1)))
    }
}

/// Points of the reserved-memory timeline are at most this close (later changes within a
/// bucket overwrite its point): ten a second keep a 10-minute window at 6000 points.
pub const TIMELINE_BUCKET_NS: u64 = 100_000_000;

/// Allocations charged to one user stack of one thread (`slot::ALLOC_STACK`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackAllocs {
    /// Successful allocations.
    pub count: u64,
    /// Bytes they allocated.
    pub bytes: u64,
    /// Allocations that failed, whatever the error.
    pub failed: u64,
    /// Bytes those failed allocations asked for.
    pub failed_bytes: u64,
}

/// An allocation that failed for lack of memory, and what came after on its thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    /// The process that asked.
    pub pid: u32,
    /// The thread that asked.
    pub tid: u32,
    /// When the failed call returned (monotonic ns).
    pub at_ns: u64,
    /// The size asked for.
    pub bytes: u64,
    /// What the traced processes held through the driver when it failed.
    pub held_bytes: u64,
    /// Frees the thread made after it, before it allocated again (the allocator emptying its
    /// cache to retry).
    pub frees_after: u64,
    /// Bytes those frees gave back (0 for blocks allocated before tracing began).
    pub freed_bytes_after: u64,
    /// When the thread next allocated (0: it has not).
    pub recovered_at_ns: u64,
}

/// A retry is the same request made again soon: an allocator that frees its cache and
/// retries asks for the same (rounded) size within this long. A success later, or of another
/// size, is the job going on after giving up.
pub const RETRY_WITHIN_NS: u64 = 1_000_000_000;

/// Failed allocations, in the two ways they end: the same request succeeded soon after (an
/// allocator's retry after emptying its cache; PyTorch tries up to three times, freeing more
/// each round), or it never did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failures {
    /// Failures the thread recovered from by making the same request again successfully.
    pub recovered: Vec<Failure>,
    /// Failures the thread gave up on: it went on to other requests, or too late.
    pub fatal: Vec<Failure>,
    /// Each thread's failure not resolved yet (the job may have died of it).
    pub pending: BTreeMap<u32, Failure>,
}

impl Failures {
    fn failed(&mut self, f: Failure) {
        match self.pending.remove(&f.tid) {
            // The same request failing again: another round of the same retry.
            Some(p) if p.bytes == f.bytes && f.at_ns.saturating_sub(p.at_ns) <= RETRY_WITHIN_NS => {
                self.pending.insert(f.tid, Failure { held_bytes: f.held_bytes, ..p });
            }
            Some(p) => {
                self.fatal.push(p);
                self.pending.insert(f.tid, f);
            }
            None => {
                self.pending.insert(f.tid, f);
            }
        }
    }

    fn freed(&mut self, tid: u32, bytes: u64) {
        if let Some(p) = self.pending.get_mut(&tid) {
            p.frees_after += 1;
            p.freed_bytes_after = p.freed_bytes_after.saturating_add(bytes);
        }
    }

    fn allocated(&mut self, tid: u32, bytes: u64, at_ns: u64) {
        if let Some(mut p) = self.pending.remove(&tid) {
            if p.bytes == bytes && at_ns.saturating_sub(p.at_ns) <= RETRY_WITHIN_NS {
                p.recovered_at_ns = at_ns;
                self.recovered.push(p);
            } else {
                self.fatal.push(p);
            }
        }
    }

    /// Failures out of memory for good: those given up on, and those never resolved (the job
    /// died of it, or the window closed first).
    pub fn for_good(&self) -> impl Iterator<Item = &Failure> {
        self.fatal.iter().chain(self.pending.values())
    }
}

/// Device memory allocated and freed through the driver, over all traced processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Successful allocation calls.
    pub count: u64,
    /// Bytes they allocated.
    pub bytes: u64,
    /// Successful free calls.
    pub frees: u64,
    /// Bytes those frees gave back, where the allocation was seen (see `unknown_frees`).
    pub freed_bytes: u64,
    /// Allocation calls that failed, and of those, how many for lack of memory.
    pub failures: u64,
    /// Of `failures`, those that returned `CUDA_ERROR_OUT_OF_MEMORY`.
    pub out_of_memory: u64,
    /// Bytes allocated while traced and not freed yet.
    pub live_bytes: u64,
    /// The most `live_bytes` reached.
    pub peak_live_bytes: u64,
    /// Host time inside allocation and free calls.
    pub call_ns: u64,
    /// `live_bytes` over time: (time, bytes) at the end of each bucket that changed it.
    pub timeline: Vec<(u64, u64)>,
    /// Device allocations by process, thread and user stack id (-1: none).
    pub by_stack: BTreeMap<(u32, u32, i64), StackAllocs>,
    /// The out-of-memory failures, by how they ended.
    pub out_of_memory_failures: Failures,
    /// Frees of blocks allocated before tracing began (their size is unknown).
    pub unknown_frees: u64,
    live: Ranges,
}

impl AllocStats {
    pub(super) fn record(&mut self, spec: &ProbeSpec, call: &CallEvent) {
        let (pid, tid, at) = (call.header.tgid, call.header.tid, call.header.ts_ns);
        self.call_ns += at.saturating_sub(call.start_ns);
        let size = spec.size_arg.map_or(0, |i| call.args[usize::from(i)]);
        if spec.family == Family::Alloc {
            let stack = i64::try_from(call.args[slot::ALLOC_STACK]).unwrap_or(-1);
            let by = self.by_stack.entry((pid, tid, stack)).or_default();
            if call.ret == 0 {
                by.count += 1;
                by.bytes = by.bytes.saturating_add(size);
            } else {
                by.failed += 1;
                by.failed_bytes = by.failed_bytes.saturating_add(size);
            }
        }
        if call.ret != 0 {
            if spec.family == Family::Alloc {
                self.failures += 1;
                if call.ret == CUDA_ERROR_OUT_OF_MEMORY {
                    self.out_of_memory += 1;
                    let held_bytes = self.live_bytes;
                    self.out_of_memory_failures.failed(Failure { pid, tid, at_ns: at, bytes: size, held_bytes, ..Failure::default() });
                }
            }
            return;
        }
        if spec.family == Family::Alloc {
            self.count += 1;
            self.bytes += size;
            self.live.insert(pid, call.out, size);
            self.live_bytes += size;
            self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
            self.out_of_memory_failures.allocated(tid, size, at);
        } else {
            self.frees += 1;
            let addr = spec.addr_arg.map_or(0, |i| call.args[usize::from(i)]);
            // Blocks allocated before we attached are freed unseen: their size is unknown.
            let size = self.live.remove(pid, addr).unwrap_or_else(|| {
                self.unknown_frees += 1;
                0
            });
            self.freed_bytes += size;
            self.live_bytes -= size;
            self.out_of_memory_failures.freed(tid, size);
        }
        self.mark(at);
    }

    /// Put the current `live_bytes` on the timeline at `at`.
    fn mark(&mut self, at: u64) {
        match self.timeline.last_mut() {
            Some(last) if last.0 / TIMELINE_BUCKET_NS == at / TIMELINE_BUCKET_NS => *last = (at, self.live_bytes),
            _ => self.timeline.push((at, self.live_bytes)),
        }
    }

    /// Whether a traced allocation of `pid` holds `addr`.
    #[must_use]
    pub fn holds(&self, pid: u32, addr: u64) -> bool {
        self.live.contains(pid, addr)
    }
}

/// Pinned host memory: host allocations and registrations through the driver, and their
/// frees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostPinStats {
    /// Successful pinning calls (host allocations and registrations).
    pub count: u64,
    /// Bytes they pinned.
    pub bytes: u64,
    /// Successful unpinning calls (host frees and unregistrations).
    pub frees: u64,
    /// Pinning calls that failed.
    pub failures: u64,
    ranges: Ranges,
}

impl HostPinStats {
    pub(super) fn record(&mut self, spec: &ProbeSpec, call: &CallEvent) {
        if call.ret != 0 {
            self.failures += u64::from(spec.family == Family::HostPin);
            return;
        }
        let pid = call.header.tgid;
        let arg = |i: Option<u8>| i.map(|i| call.args[usize::from(i)]);
        if spec.family == Family::HostPin {
            // Allocations return the address through an out-pointer; registrations take it.
            let addr = if spec.out_arg.is_some() { call.out } else { arg(spec.addr_arg).unwrap_or(0) };
            let size = arg(spec.size_arg).unwrap_or(0);
            self.count += 1;
            self.bytes += size;
            self.ranges.insert(pid, addr, size);
        } else {
            self.frees += 1;
            self.ranges.remove(pid, arg(spec.addr_arg).unwrap_or(0));
        }
    }

    /// Whether memory pinned in `pid` by a call we traced, and not unpinned since, holds
    /// `addr`.
    #[must_use]
    pub fn contains(&self, pid: u32, addr: u64) -> bool {
        self.ranges.contains(pid, addr)
    }
}

/// One context call (create, primary retain/release, destroy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextCall {
    /// The entry point called.
    pub symbol: &'static str,
    /// The calling process.
    pub pid: u32,
    /// The calling thread.
    pub tid: u32,
    /// When the call returned (monotonic ns).
    pub ts_ns: u64,
    /// Host time inside the call, ns.
    pub duration_ns: u64,
    /// The `CUresult` it returned (0: success).
    pub result: u32,
}

impl ContextCall {
    /// The context call `call` of probe `spec`.
    #[must_use]
    pub fn of(spec: &gputrace_common::ProbeSpec, call: &gputrace_common::CallEvent) -> Self {
        Self {
            symbol: spec.symbol,
            pid: call.header.tgid,
            tid: call.header.tid,
            ts_ns: call.header.ts_ns,
            duration_ns: call.header.ts_ns.saturating_sub(call.start_ns),
            result: call.ret as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::{spec_of, EventHeader, CALL_ARGS, KIND_CALL};

    use super::*;

    const ALLOC: u32 = 44; // cuMemAlloc_v2
    const FREE: u32 = 45; // cuMemFree_v2

    /// `cuMemAlloc_v2(&p, bytes)` at `at` returning `ret` and address `out`, from stack 9.
    fn alloc(at: u64, bytes: u64, ret: u64, out: u64) -> CallEvent {
        let mut args = [0; CALL_ARGS];
        args[1] = bytes;
        args[slot::ALLOC_STACK] = 9;
        CallEvent { header: EventHeader { kind: KIND_CALL, probe: ALLOC, tgid: 1, tid: 2, ts_ns: at }, start_ns: at, args, ret, out }
    }

    fn free(at: u64, addr: u64) -> CallEvent {
        let mut args = [0; CALL_ARGS];
        args[0] = addr;
        CallEvent { header: EventHeader { kind: KIND_CALL, probe: FREE, tgid: 1, tid: 2, ts_ns: at }, start_ns: at, args, ret: 0, out: 0 }
    }

    fn apply(stats: &mut AllocStats, calls: &[CallEvent]) {
        for c in calls {
            stats.record(spec_of(c.header.probe).expect("a known probe"), c);
        }
    }

    #[test]
    fn a_retry_after_frees_recovers_and_a_failed_retry_is_for_good() {
        let mut m = AllocStats::default();
        apply(&mut m, &[
            alloc(10, 100, 0, 0x1000),
            alloc(20, 500, CUDA_ERROR_OUT_OF_MEMORY, 0),
            free(30, 0x1000),
            alloc(40, 500, 0, 0x2000),
            alloc(50, 900, CUDA_ERROR_OUT_OF_MEMORY, 0),
            free(60, 0x2000),
            alloc(70, 900, CUDA_ERROR_OUT_OF_MEMORY, 0),
        ]);
        let f = &m.out_of_memory_failures;
        assert_eq!(f.recovered.len(), 1);
        assert_eq!((f.recovered[0].bytes, f.recovered[0].frees_after, f.recovered[0].freed_bytes_after, f.recovered[0].recovered_at_ns), (500, 1, 100, 40));
        // Fail, free, fail: one request, still unresolved (the job may die of it).
        assert!(f.fatal.is_empty());
        assert_eq!((f.pending[&2].bytes, f.pending[&2].held_bytes, f.pending[&2].frees_after, f.pending[&2].at_ns), (900, 0, 1, 50));
        assert_eq!(f.for_good().count(), 1);
        assert_eq!(m.by_stack[&(1, 2, 9)], StackAllocs { count: 2, bytes: 600, failed: 3, failed_bytes: 2300 });
    }

    #[test]
    fn rounds_of_one_retry_recover_and_going_on_to_other_requests_is_giving_up() {
        let mut m = AllocStats::default();
        // Fail, free some, fail, free all, succeed: PyTorch's three tries, one recovery.
        apply(&mut m, &[
            alloc(10, 100, 0, 0x1000),
            alloc(20, 500, CUDA_ERROR_OUT_OF_MEMORY, 0),
            free(30, 0x1000),
            alloc(40, 500, CUDA_ERROR_OUT_OF_MEMORY, 0),
            alloc(50, 500, 0, 0x2000),
        ]);
        assert_eq!((m.out_of_memory_failures.recovered.len(), m.out_of_memory_failures.for_good().count()), (1, 0));
        // A huge request that fails, then smaller ones that succeed: the huge one was given up.
        apply(&mut m, &[alloc(60, 1 << 40, CUDA_ERROR_OUT_OF_MEMORY, 0), alloc(70, 1 << 40, CUDA_ERROR_OUT_OF_MEMORY, 0), alloc(80, 64, 0, 0x3000)]);
        let f = &m.out_of_memory_failures;
        assert_eq!(f.fatal.iter().map(|x| x.bytes).collect::<Vec<_>>(), [1 << 40]);
        // The same size long after is not a retry.
        apply(&mut m, &[alloc(100, 7, CUDA_ERROR_OUT_OF_MEMORY, 0), alloc(100 + 2 * RETRY_WITHIN_NS, 7, 0, 0x4000)]);
        assert_eq!(m.out_of_memory_failures.fatal.len(), 2);
    }

    #[test]
    fn the_timeline_keeps_one_point_per_bucket() {
        let mut m = AllocStats::default();
        apply(&mut m, &[alloc(1, 10, 0, 0x1), alloc(2, 10, 0, 0x2), alloc(TIMELINE_BUCKET_NS + 1, 5, 0, 0x3), free(TIMELINE_BUCKET_NS + 2, 0x1)]);
        assert_eq!(m.timeline, vec![(2, 20), (TIMELINE_BUCKET_NS + 2, 15)]);
    }
}
