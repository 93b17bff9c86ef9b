//! Device allocations, pinned host memory and context calls.

use std::collections::BTreeMap;

use gputrace_common::{CallEvent, Family, ProbeSpec};

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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    pub count: u64,
    pub bytes: u64,
    pub frees: u64,
    pub freed_bytes: u64,
    /// Allocation calls that failed, and of those, how many for lack of memory.
    pub failures: u64,
    pub out_of_memory: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    /// Host time inside allocation and free calls.
    pub call_ns: u64,
    live: Ranges,
}

impl AllocStats {
    pub(super) fn record(&mut self, spec: &ProbeSpec, call: &CallEvent) {
        let pid = call.header.tgid;
        self.call_ns += call.header.ts_ns.saturating_sub(call.start_ns);
        if call.ret != 0 {
            if spec.family == Family::Alloc {
                self.failures += 1;
                if call.ret == CUDA_ERROR_OUT_OF_MEMORY {
                    self.out_of_memory += 1;
                }
            }
            return;
        }
        if spec.family == Family::Alloc {
            let size = spec.size_arg.map_or(0, |i| call.args[usize::from(i)]);
            self.count += 1;
            self.bytes += size;
            self.live.insert(pid, call.out, size);
            self.live_bytes += size;
            self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
        } else {
            self.frees += 1;
            let addr = spec.addr_arg.map_or(0, |i| call.args[usize::from(i)]);
            // Blocks allocated before we attached are freed unseen: their size is unknown.
            if let Some(size) = self.live.remove(pid, addr) {
                self.freed_bytes += size;
                self.live_bytes -= size;
            }
        }
    }

    /// Whether a traced allocation of `pid` holds `addr`.
    #[must_use]
    pub fn holds(&self, pid: u32, addr: u64) -> bool {
        self.live.contains(pid, addr)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostPinStats {
    pub count: u64,
    pub bytes: u64,
    pub frees: u64,
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

    #[must_use]
    pub fn contains(&self, pid: u32, addr: u64) -> bool {
        self.ranges.contains(pid, addr)
    }
}

/// One context call (create, primary retain/release, destroy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextCall {
    pub symbol: &'static str,
    pub pid: u32,
    pub tid: u32,
    pub ts_ns: u64,
    pub duration_ns: u64,
    pub result: u32,
}
