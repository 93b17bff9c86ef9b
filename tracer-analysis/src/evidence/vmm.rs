//! Virtual memory management: `cuMemMap`/`cuMemUnmap`, how PyTorch's expandable segments
//! grow and shrink a segment. The physical memory behind a mapping is allocated by
//! `cuMemCreate` and counted with the allocations; this counts the mappings.

use gputrace_common::{CallEvent, Family, ProbeSpec};

/// Totals of the virtual memory mapping calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmmStats {
    /// Successful `cuMemMap` calls and the bytes they mapped.
    pub maps: u64,
    /// Bytes those calls mapped.
    pub mapped_bytes: u64,
    /// Successful `cuMemUnmap` calls and the bytes they unmapped.
    pub unmaps: u64,
    /// Bytes those calls unmapped.
    pub unmapped_bytes: u64,
    /// Map or unmap calls that failed.
    pub failures: u64,
    /// Host time inside map and unmap calls.
    pub call_ns: u64,
}

impl VmmStats {
    pub(super) fn record(&mut self, spec: &ProbeSpec, call: &CallEvent) {
        self.call_ns += call.header.ts_ns.saturating_sub(call.start_ns);
        if call.ret != 0 {
            self.failures += 1;
            return;
        }
        let size = spec.size_arg.map_or(0, |i| call.args[usize::from(i)]);
        if spec.family == Family::Map {
            self.maps += 1;
            self.mapped_bytes += size;
        } else {
            self.unmaps += 1;
            self.unmapped_bytes += size;
        }
    }
}
