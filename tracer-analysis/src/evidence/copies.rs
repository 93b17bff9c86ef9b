//! Copies: direction, bytes, host time inside the call, and whether the host side was
//! pinned or pageable — with how each copy was classified, since the evidence must say.

use gputrace_common::{
    cuda::{memory_type, slot},
    CallEvent, CopyDir, ProbeSpec,
};

use super::{AllocStats, HostPinStats};

/// Which way a copy went: from its entry point, or where that does not say, from its
/// pointers or memory types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// Host memory to device memory.
    HostToDevice,
    /// Device memory to host memory.
    DeviceToHost,
    /// Within device memory.
    DeviceToDevice,
    /// Between the devices of two contexts (`cuMemcpyPeer`).
    Peer,
    /// Both ends in host memory (a 2D/3D copy between two host buffers, or `cuMemcpy`
    /// between two host pointers). The driver copies on the CPU: nothing crosses the bus, so
    /// counting it with device copies would overstate GPU traffic, and there is no DMA whose
    /// speed pinning would change, so neither end is classified.
    HostToHost,
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

/// Totals of the copies in one direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Copy calls.
    pub count: u64,
    /// Bytes they named.
    pub bytes: u64,
    /// Copies whose host side was pageable memory.
    pub pageable: u64,
    /// Bytes of those pageable copies.
    pub pageable_bytes: u64,
    /// Copies whose host side was pinned by a call we traced.
    pub pinned_traced: u64,
    /// Copies whose host side lay in a pinned mapping made before we attached.
    pub pinned_by_map: u64,
    /// Copies whose host address was no longer mapped when looked up (not classified).
    pub unknown_host: u64,
    /// Host time spent inside copy calls.
    pub call_ns: u64,
    /// Calls to synchronous copy APIs (the host waits for the copy by contract).
    pub sync_api: u64,
    /// Async copies followed by a synchronize on the same thread (`non_blocking=False`,
    /// `.cpu()`), and the time those synchronizes waited.
    pub then_synced: u64,
    /// Time those synchronizes waited, ns.
    pub then_synced_wait_ns: u64,
    /// Device-to-host copies of a few bytes followed by a synchronize (`.item()`), and
    /// the time those synchronizes waited.
    pub scalar_reads: u64,
    /// Time those reads waited, ns (the synchronize's, or a synchronous copy's own).
    pub scalar_read_wait_ns: u64,
}

/// Copy totals, one per direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Host to device.
    pub h2d: DirStats,
    /// Device to host.
    pub d2h: DirStats,
    /// Device to device.
    pub d2d: DirStats,
    /// Between devices (`cuMemcpyPeer`).
    pub peer: DirStats,
    /// Host to host: both ends in host memory.
    pub h2h: DirStats,
}

impl CopyStats {
    /// The totals of direction `dir`.
    pub fn dir_mut(&mut self, dir: Direction) -> &mut DirStats {
        match dir {
            Direction::HostToDevice => &mut self.h2d,
            Direction::DeviceToHost => &mut self.d2h,
            Direction::DeviceToDevice => &mut self.d2d,
            Direction::Peer => &mut self.peer,
            Direction::HostToHost => &mut self.h2h,
        }
    }

    /// Record one copy call; returns its direction and how its host side was classified
    /// (None for copies without a host end).
    pub(super) fn record(
        &mut self,
        spec: &ProbeSpec,
        call: &CallEvent,
        duration_ns: u64,
        allocs: &AllocStats,
        pins: &HostPinStats,
        host: &mut dyn HostMemory,
    ) -> (Direction, Option<CopyClass>) {
        let pid = call.header.tgid;
        let arg = |i: Option<u8>| i.map(|i| call.args[usize::from(i)]);
        let (dir, host_ptr) = match spec.copy {
            CopyDir::HostToDevice => (Direction::HostToDevice, arg(spec.host_arg)),
            CopyDir::DeviceToHost => (Direction::DeviceToHost, arg(spec.host_arg)),
            CopyDir::Peer => (Direction::Peer, None),
            CopyDir::Infer => {
                let mut by_pointer = |p: u64| End::by_pointer(p, pid, call.start_ns, allocs, host);
                let dst = by_pointer(call.args[0]);
                direction(by_pointer(call.args[1]), dst)
            }
            CopyDir::FromStruct2D | CopyDir::FromStruct3D => {
                let mut by_type = |ty: usize, ptr: usize| End::by_type(call.args[ty], call.args[ptr], pid, call.start_ns, allocs, host);
                let src = by_type(slot::SRC_TYPE, slot::SRC_PTR);
                direction(src, by_type(slot::DST_TYPE, slot::DST_PTR))
            }
            CopyDir::DeviceToDevice | CopyDir::None => (Direction::DeviceToDevice, None),
        };
        let bytes = arg(spec.size_arg).unwrap_or(0);
        let stats = self.dir_mut(dir);
        stats.count += 1;
        stats.bytes += bytes;
        stats.call_ns += duration_ns;
        if spec.sync_api {
            stats.sync_api += 1;
        }
        let class = host_ptr.map(|ptr| classify(ptr, pid, call.start_ns, pins, host));
        match class {
            Some(CopyClass::PinnedTraced) => stats.pinned_traced += 1,
            Some(CopyClass::PinnedByMap) => stats.pinned_by_map += 1,
            Some(CopyClass::Pageable) => {
                stats.pageable += 1;
                stats.pageable_bytes += bytes;
            }
            Some(CopyClass::Unknown) => stats.unknown_host += 1,
            None => {}
        }
        (dir, class)
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

/// One end of a copy whose direction is not fixed by the entry point's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Host(u64),
    Device,
}

impl End {
    /// A unified address: device memory if an allocation we traced holds it, or the process
    /// does not map it (device memory is not in the host's map); else host memory.
    fn by_pointer(ptr: u64, pid: u32, at_ns: u64, allocs: &AllocStats, host: &mut dyn HostMemory) -> Self {
        if allocs.holds(pid, ptr) || host.classify(pid, ptr, at_ns) == HostClass::Unmapped {
            Self::Device
        } else {
            Self::Host(ptr)
        }
    }

    /// An end of a 2D/3D copy, by its `CUmemorytype`. A unified end, or one whose type the
    /// probe could not read (0), is decided from its pointer, as `cuMemcpy` is.
    fn by_type(ty: u64, ptr: u64, pid: u32, at_ns: u64, allocs: &AllocStats, host: &mut dyn HostMemory) -> Self {
        match ty {
            memory_type::HOST => Self::Host(ptr),
            // An array is device memory; its handle is not an address.
            memory_type::DEVICE | memory_type::ARRAY => Self::Device,
            _ => Self::by_pointer(ptr, pid, at_ns, allocs, host),
        }
    }
}

/// Direction of a copy from its two ends, with the host pointer to classify.
fn direction(src: End, dst: End) -> (Direction, Option<u64>) {
    match (src, dst) {
        (End::Host(p), End::Device) => (Direction::HostToDevice, Some(p)),
        (End::Device, End::Host(p)) => (Direction::DeviceToHost, Some(p)),
        (End::Device, End::Device) => (Direction::DeviceToDevice, None),
        (End::Host(_), End::Host(_)) => (Direction::HostToHost, None),
    }
}
