//! Copies: direction, bytes, host time inside the call, and whether the host side was
//! pinned or pageable — with how each copy was classified, since the evidence must say.

use gputrace_common::{CallEvent, CopyDir, ProbeSpec};

use super::{AllocStats, HostPinStats};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    Peer,
}

/// What the process's memory map says about a host address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostClass {
    /// A shared `/dev/zero (deleted)` mapping: how `cudaHostAlloc` memory looks.
    PinnedMapping,
    /// Any other mapping (private anonymous memory, heap, files).
    Pageable,
    /// Not mapped in the process (or the process is gone).
    Unmapped,
}

/// Looks up host addresses in a process's memory map. The live implementation reads
/// `/proc/PID/maps`; tests give a synthetic one.
pub trait HostMemory {
    /// Classify `addr` in `pid` as it was at monotonic time `at_ns` (the call's time).
    fn classify(&mut self, pid: u32, addr: u64, at_ns: u64) -> HostClass;
}

/// How the host side of a copy was classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyClass {
    /// Pinned by a `cuMemHostAlloc`/`cuMemAllocHost`/`cuMemHostRegister` we traced.
    PinnedTraced,
    /// Pinned before we attached: lies in a shared `/dev/zero (deleted)` mapping.
    PinnedByMap,
    /// Pageable: ordinary process memory, not pinned by any call we saw.
    Pageable,
    /// The address was not mapped when we looked (the process exited, or freed it).
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    pub count: u64,
    pub bytes: u64,
    pub pageable: u64,
    pub pageable_bytes: u64,
    pub pinned_traced: u64,
    pub pinned_by_map: u64,
    pub unknown_host: u64,
    /// Host time spent inside copy calls.
    pub call_ns: u64,
    /// Calls to synchronous copy APIs (the host waits for the copy by contract).
    pub sync_api: u64,
    /// Async copies followed by a synchronize on the same thread (`non_blocking=False`,
    /// `.cpu()`), and the time those synchronizes waited.
    pub then_synced: u64,
    pub then_synced_wait_ns: u64,
    /// Device-to-host copies of a few bytes followed by a synchronize (`.item()`), and
    /// the time those synchronizes waited.
    pub scalar_reads: u64,
    pub scalar_read_wait_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    pub h2d: DirStats,
    pub d2h: DirStats,
    pub d2d: DirStats,
    pub peer: DirStats,
}

impl CopyStats {
    pub fn dir_mut(&mut self, dir: Direction) -> &mut DirStats {
        match dir {
            Direction::HostToDevice => &mut self.h2d,
            Direction::DeviceToHost => &mut self.d2h,
            Direction::DeviceToDevice => &mut self.d2d,
            Direction::Peer => &mut self.peer,
        }
    }

    /// Record one copy call; returns its direction.
    pub(super) fn record(
        &mut self,
        spec: &ProbeSpec,
        call: &CallEvent,
        duration_ns: u64,
        allocs: &AllocStats,
        pins: &HostPinStats,
        host: &mut dyn HostMemory,
    ) -> Direction {
        let pid = call.header.tgid;
        let arg = |i: Option<u8>| i.map(|i| call.args[usize::from(i)]);
        let (dir, host_ptr) = match spec.copy {
            CopyDir::HostToDevice => (Direction::HostToDevice, arg(spec.host_arg)),
            CopyDir::DeviceToHost => (Direction::DeviceToHost, arg(spec.host_arg)),
            CopyDir::Peer => (Direction::Peer, None),
            CopyDir::Infer => infer(call.args[0], call.args[1], pid, call.start_ns, allocs, host),
            CopyDir::DeviceToDevice | CopyDir::None => (Direction::DeviceToDevice, None),
        };
        let bytes = arg(spec.size_arg).unwrap_or(0);
        let stats = self.dir_mut(dir);
        stats.count += 1;
        stats.bytes += bytes;
        stats.call_ns += duration_ns;
        if spec.drains_queue
            || matches!(spec.symbol, "cuMemcpyHtoD_v2" | "cuMemcpyHtoD_v2_ptds" | "cuMemcpyDtoD_v2" | "cuMemcpy" | "cuMemcpyPeer")
        {
            stats.sync_api += 1;
        }
        if let Some(ptr) = host_ptr {
            match classify(ptr, pid, call.start_ns, pins, host) {
                CopyClass::PinnedTraced => stats.pinned_traced += 1,
                CopyClass::PinnedByMap => stats.pinned_by_map += 1,
                CopyClass::Pageable => {
                    stats.pageable += 1;
                    stats.pageable_bytes += bytes;
                }
                CopyClass::Unknown => stats.unknown_host += 1,
            }
        }
        dir
    }
}

/// Classify a copy's host pointer: pinning we saw happen wins, then the memory map.
#[must_use]
pub fn classify(ptr: u64, pid: u32, at_ns: u64, pins: &HostPinStats, host: &mut dyn HostMemory) -> CopyClass {
    if pins.contains(pid, ptr) {
        return CopyClass::PinnedTraced;
    }
    match host.classify(pid, ptr, at_ns) {
        HostClass::PinnedMapping => CopyClass::PinnedByMap,
        HostClass::Pageable => CopyClass::Pageable,
        HostClass::Unmapped => CopyClass::Unknown,
    }
}

/// Direction of a unified-addressing copy (`cuMemcpy(dst, src, n)`): a pointer is device
/// memory if an allocation we traced holds it, else host memory if the process maps it.
fn infer(dst: u64, src: u64, pid: u32, at_ns: u64, allocs: &AllocStats, host: &mut dyn HostMemory) -> (Direction, Option<u64>) {
    let mut on_device = |p: u64| allocs.holds(pid, p) || host.classify(pid, p, at_ns) == HostClass::Unmapped;
    match (on_device(dst), on_device(src)) {
        (true, false) => (Direction::HostToDevice, Some(src)),
        (false, true) => (Direction::DeviceToHost, Some(dst)),
        // Host to host through cuMemcpy is legal but rare; count it with device copies.
        _ => (Direction::DeviceToDevice, None),
    }
}
