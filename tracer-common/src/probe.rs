//! The CUDA driver entry points gputrace probes, with stable ids.
//!
//! Ids are gapped by family so that new entry points can join a family without renumbering.
//! An id is also the probe's slot in [`crate::ThreadCounters::hits`], so ids stay below
//! [`PROBE_SLOTS`]. The eBPF program attached to a symbol is named after it; the return
//! probe of a call probe is named `<symbol>_ret`.

/// Number of hit slots per thread; every probe id is smaller.
pub const PROBE_SLOTS: usize = 64;

/// How many raw integer arguments a call probe saves at entry.
pub const CALL_ARGS: usize = 5;

/// What a probed function does, which decides how its events are read.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Kernel launch: entry-only, counted in the kernel, no event.
    Launch = 1,
    /// CUDA graph launch: entry-only, counted in the kernel, no event.
    GraphLaunch = 2,
    /// Memory copy (any direction); entry and return.
    Copy = 3,
    /// Device memset; entry and return.
    Memset = 4,
    /// Host waits for device work; entry and return. Its return leaves the queue drained.
    Sync = 5,
    /// Device memory allocation; entry and return.
    Alloc = 6,
    /// Device memory release; entry and return.
    Free = 7,
    /// Pinned host memory allocation or registration; entry and return.
    HostPin = 8,
    /// Pinned host memory release or unregistration; entry and return.
    HostUnpin = 9,
    /// Context creation, retain, release, destroy; entry and return.
    Context = 10,
}

/// Direction of a copy as the entry point's name fixes it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDir {
    HostToDevice = 1,
    DeviceToHost = 2,
    DeviceToDevice = 3,
    /// Unified-addressing copies (`cuMemcpy`, `cuMemcpyAsync`): decided from the pointers.
    Infer = 4,
    /// Between two contexts' devices.
    Peer = 5,
    /// Not a copy.
    None = 0,
}

/// One probed symbol and how to read its arguments.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    pub id: u32,
    pub symbol: &'static str,
    pub family: Family,
    pub copy: CopyDir,
    /// Index of the argument holding the byte count (copies, memsets, allocations).
    pub size_arg: Option<u8>,
    /// Index of the argument holding the host pointer of a copy.
    pub host_arg: Option<u8>,
    /// Index of an out-pointer argument whose target the return probe reads
    /// (the address an allocation returned).
    pub out_arg: Option<u8>,
    /// Index of the argument holding the address a free or unpin releases.
    pub addr_arg: Option<u8>,
    /// The call returns only after the device queue it targets is empty: synchronize calls
    /// and synchronous copies (CUDA driver API docs, "API synchronization behavior").
    pub drains_queue: bool,
}

const fn spec(id: u32, symbol: &'static str, family: Family) -> ProbeSpec {
    ProbeSpec {
        id,
        symbol,
        family,
        copy: CopyDir::None,
        size_arg: None,
        host_arg: None,
        out_arg: None,
        addr_arg: None,
        drains_queue: false,
    }
}

const fn launch(id: u32, symbol: &'static str) -> ProbeSpec {
    spec(id, symbol, Family::Launch)
}

const fn graph(id: u32, symbol: &'static str) -> ProbeSpec {
    spec(id, symbol, Family::GraphLaunch)
}

/// A copy. `host` is the index of the host pointer where the name fixes one.
const fn copy(id: u32, symbol: &'static str, dir: CopyDir, size: u8, host: Option<u8>, sync: bool) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Copy);
    s.copy = dir;
    s.size_arg = Some(size);
    s.host_arg = host;
    s.drains_queue = sync;
    s
}

const fn memset(id: u32, symbol: &'static str) -> ProbeSpec {
    // cuMemsetD8/D32(dstDevice, value, N[, stream]): N elements at argument 2.
    let mut s = spec(id, symbol, Family::Memset);
    s.size_arg = Some(2);
    s
}

const fn sync(id: u32, symbol: &'static str) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Sync);
    s.drains_queue = true;
    s
}

const fn alloc(id: u32, symbol: &'static str, out: u8, size: u8) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Alloc);
    s.out_arg = Some(out);
    s.size_arg = Some(size);
    s
}

const fn free(id: u32, symbol: &'static str) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Free);
    s.addr_arg = Some(0);
    s
}

const fn pin(id: u32, symbol: &'static str, out: Option<u8>, addr: Option<u8>, size: u8) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::HostPin);
    s.out_arg = out;
    s.addr_arg = addr;
    s.size_arg = Some(size);
    s
}

const fn unpin(id: u32, symbol: &'static str) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::HostUnpin);
    s.addr_arg = Some(0);
    s
}

const fn context(id: u32, symbol: &'static str) -> ProbeSpec {
    spec(id, symbol, Family::Context)
}

use CopyDir::{DeviceToDevice as D2D, DeviceToHost as D2H, HostToDevice as H2D, Infer, Peer};

/// Every probed driver symbol. Signatures: CUDA 13 `cuda.h`; `_ptsz`/`_ptds` are the
/// per-thread-default-stream variants with the same arguments.
pub const PROBES: &[ProbeSpec] = &[
    // Launches (entry-only; counted per thread in the kernel).
    launch(1, "cuLaunchKernel"),
    launch(2, "cuLaunchKernel_ptsz"),
    launch(3, "cuLaunchKernelEx"),
    launch(4, "cuLaunchKernelEx_ptsz"),
    launch(5, "cuLaunchCooperativeKernel"),
    launch(6, "cuLaunchCooperativeKernel_ptsz"),
    graph(8, "cuGraphLaunch"),
    graph(9, "cuGraphLaunch_ptsz"),
    // Copies. cuMemcpyHtoD(dst, srcHost, bytes), cuMemcpyDtoH(dstHost, src, bytes),
    // cuMemcpyDtoD(dst, src, bytes), cuMemcpy(dst, src, bytes),
    // cuMemcpyPeer(dst, dstCtx, src, srcCtx, bytes). Synchronous forms drain the queue.
    copy(16, "cuMemcpyHtoD_v2", H2D, 2, Some(1), false),
    copy(17, "cuMemcpyDtoH_v2", D2H, 2, Some(0), true),
    copy(18, "cuMemcpyDtoD_v2", D2D, 2, None, false),
    copy(19, "cuMemcpyHtoDAsync_v2", H2D, 2, Some(1), false),
    copy(20, "cuMemcpyHtoDAsync_v2_ptsz", H2D, 2, Some(1), false),
    copy(21, "cuMemcpyDtoHAsync_v2", D2H, 2, Some(0), false),
    copy(22, "cuMemcpyDtoHAsync_v2_ptsz", D2H, 2, Some(0), false),
    copy(23, "cuMemcpyDtoDAsync_v2", D2D, 2, None, false),
    copy(24, "cuMemcpyDtoDAsync_v2_ptsz", D2D, 2, None, false),
    copy(25, "cuMemcpy", Infer, 2, None, false),
    copy(26, "cuMemcpyAsync", Infer, 2, None, false),
    copy(27, "cuMemcpyAsync_ptsz", Infer, 2, None, false),
    copy(28, "cuMemcpyPeer", Peer, 4, None, false),
    copy(29, "cuMemcpyPeerAsync", Peer, 4, None, false),
    copy(30, "cuMemcpyHtoD_v2_ptds", H2D, 2, Some(1), false),
    copy(31, "cuMemcpyDtoH_v2_ptds", D2H, 2, Some(0), true),
    // Memsets.
    memset(32, "cuMemsetD8_v2"),
    memset(33, "cuMemsetD32_v2"),
    memset(34, "cuMemsetD8Async"),
    memset(35, "cuMemsetD32Async"),
    // Synchronization. PyTorch's torch.cuda.synchronize() reaches cuCtxSynchronize_v2
    // (CUDA 13, driver 580: seen on the GPU machine, docs/validation.md), not cuCtxSynchronize.
    sync(37, "cuCtxSynchronize_v2"),
    sync(40, "cuStreamSynchronize"),
    sync(41, "cuStreamSynchronize_ptsz"),
    sync(42, "cuCtxSynchronize"),
    sync(43, "cuEventSynchronize"),
    // Device memory. cuMemAlloc(CUdeviceptr *dptr, size_t bytes);
    // cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream);
    // cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool, CUstream);
    // cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp*, flags);
    // cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, flags).
    alloc(44, "cuMemAlloc_v2", 0, 1),
    free(45, "cuMemFree_v2"),
    alloc(46, "cuMemAllocAsync", 0, 1),
    free(47, "cuMemFreeAsync"),
    alloc(48, "cuMemAllocFromPoolAsync", 0, 1),
    alloc(49, "cuMemCreate", 0, 1),
    free(50, "cuMemRelease"),
    alloc(51, "cuMemAllocManaged", 0, 1),
    // Pinned host memory. cuMemHostAlloc(void **pp, size_t bytes, flags);
    // cuMemAllocHost(void **pp, size_t bytes); cuMemHostRegister(void *p, size_t bytes, flags).
    pin(52, "cuMemHostAlloc", Some(0), None, 1),
    pin(53, "cuMemAllocHost_v2", Some(0), None, 1),
    unpin(54, "cuMemFreeHost"),
    pin(55, "cuMemHostRegister_v2", None, Some(0), 1),
    unpin(56, "cuMemHostUnregister"),
    // Contexts.
    context(58, "cuCtxCreate_v2"),
    context(59, "cuDevicePrimaryCtxRetain"),
    context(60, "cuDevicePrimaryCtxRelease_v2"),
    context(61, "cuCtxDestroy_v2"),
    context(62, "cuCtxCreate_v4"),
];

/// The spec of a probe id, if it is one of ours.
#[must_use]
pub const fn spec_of(id: u32) -> Option<&'static ProbeSpec> {
    let mut i = 0;
    while i < PROBES.len() {
        if PROBES[i].id == id {
            return Some(&PROBES[i]);
        }
        i += 1;
    }
    None
}

/// Whether the probe's return leaves the device queue drained (compile-time helper for the
/// eBPF side, which cannot index tables cheaply at run time).
#[must_use]
pub const fn drains_queue(id: u32) -> bool {
    match spec_of(id) {
        Some(s) => s.drains_queue,
        None => false,
    }
}

/// Out-pointer argument index, or `u8::MAX` for none (compile-time helper for eBPF).
#[must_use]
pub const fn out_arg(id: u32) -> u8 {
    match spec_of(id) {
        Some(ProbeSpec { out_arg: Some(i), .. }) => *i,
        _ => u8::MAX,
    }
}

const fn ids_fit() -> bool {
    let mut i = 0;
    while i < PROBES.len() {
        if PROBES[i].id as usize >= PROBE_SLOTS {
            return false;
        }
        let mut j = i + 1;
        while j < PROBES.len() {
            if PROBES[i].id == PROBES[j].id {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    true
}
const _: () = assert!(ids_fit(), "probe ids must be unique and below PROBE_SLOTS");
