//! The CUDA driver entry points gputrace probes, with stable ids.
//!
//! Ids are gapped by family so that new entry points can join a family without renumbering.
//! An id is also the probe's slot in [`crate::ThreadCounters::hits`], so ids stay below
//! [`PROBE_SLOTS`]. The eBPF program attached to a symbol is named after it; the return
//! probe of a call probe is named `<symbol>_ret`.
//!
//! Ids 1–62 hold the first families. The 2D/3D copies (64–73) and the virtual-memory calls
//! (80–81) start past them rather than taking the twelve ids still free below 64: those lie
//! between other families, so one family would be scattered over four gaps and no id would
//! be left for the next entry point.

use crate::cuda::CopyLayout;

/// Number of hit slots per thread; every probe id is smaller. Raising it grows each
/// `THREADS` entry by 8 bytes a slot (96 slots: 784 bytes, about 12 MiB for the whole
/// preallocated map); the eBPF side never builds one on its stack (it copies a zero
/// template map entry), so the 512-byte stack limit does not bound it.
pub const PROBE_SLOTS: usize = 96;

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
    /// Mapping physical memory (a `cuMemCreate` handle) into a reserved virtual range:
    /// `cuMemMap`, how PyTorch's expandable segments grow. Its own family, not `Alloc`: the
    /// memory was already counted when `cuMemCreate` allocated it, and one handle may be
    /// mapped, unmapped and mapped again. Entry and return.
    Map = 11,
    /// Unmapping a virtual range (`cuMemUnmap`); the memory stays allocated until its
    /// handle is released. Entry and return.
    Unmap = 12,
    /// A framework's caching allocator reporting a block handed out (a positive size) or
    /// given back (a negative one): a tensor's memory, carved from segments the driver-level
    /// `Alloc` calls reserved. PyTorch reports each to its profiler hook
    /// (`c10::reportMemoryUsageToProfiler`), called whether or not a profiler listens. Entry
    /// only: the call carries everything, and a return probe on a C++ call path would break
    /// an exception's unwinding through it.
    Block = 13,
    /// A NCCL collective or point-to-point call (`ncclAllReduce`, `ncclSend`, …): queued on a
    /// stream, it returns at once, and the host waits for it later, in a synchronize. Entry
    /// and return; the entry reads its arguments by [`ProbeSpec::nccl`] (some are on the
    /// stack).
    Collective = 14,
    /// A NCCL communicator made or destroyed, or a group of calls ended (`ncclGroupEnd`,
    /// where grouped calls are queued). Entry and return.
    Comm = 15,
}

/// Direction of a copy as the entry point's name fixes it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDir {
    /// Host to device (`cuMemcpyHtoD*`).
    HostToDevice = 1,
    /// Device to host (`cuMemcpyDtoH*`).
    DeviceToHost = 2,
    /// Device to device (`cuMemcpyDtoD*`).
    DeviceToDevice = 3,
    /// Unified-addressing copies (`cuMemcpy`, `cuMemcpyAsync`): decided from the pointers.
    Infer = 4,
    /// Between two contexts' devices.
    Peer = 5,
    /// 2D copies (`cuMemcpy2D_v2` and forms): the only argument points at a
    /// `CUDA_MEMCPY2D`, whose memory types decide the direction. The entry probe reads the
    /// struct into the argument slots laid out by [`crate::cuda::slot`].
    FromStruct2D = 6,
    /// 3D copies (`cuMemcpy3D_v2` and forms), from a `CUDA_MEMCPY3D`; as [`Self::FromStruct2D`].
    FromStruct3D = 7,
    /// Not a copy.
    None = 0,
}

impl CopyDir {
    /// Whether the direction comes from a copy-parameters struct read at entry.
    #[must_use]
    pub const fn from_struct(self) -> bool {
        matches!(self, Self::FromStruct2D | Self::FromStruct3D)
    }

    /// Field offsets the entry probe reads, for copies described by a struct.
    #[must_use]
    pub const fn layout(self) -> Option<&'static CopyLayout> {
        match self {
            Self::FromStruct2D => Some(&crate::cuda::MEMCPY2D),
            Self::FromStruct3D => Some(&crate::cuda::MEMCPY3D),
            _ => None,
        }
    }
}

/// How a copy entry point makes the host wait (CUDA driver API docs, "API synchronization
/// behavior").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// An async API: returns once the copy is queued (from pageable memory, once staged).
    Queued,
    /// A synchronous API; whether it leaves the queue drained depends on the copy.
    Blocks,
    /// A synchronous device-to-host API: it returns only when the copy, and so all work
    /// queued before it, is done.
    Drains,
}

/// One probed symbol and how to read its arguments.
#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    /// Stable id (see the module docs): its hit slot and the `probe` of its records.
    pub id: u32,
    /// The symbol probed, and the name of its eBPF program; for `Family::Block`, the program's name
    /// only (the symbol is found by [`ALLOCATOR_SYMBOLS`]).
    pub symbol: &'static str,
    /// What the call does.
    pub family: Family,
    /// A copy's direction; `CopyDir::None` for every other call.
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
    /// and synchronous copies to the host (CUDA driver API docs, "API synchronization
    /// behavior"). Synchronous 2D/3D copies decide it per call: [`drains_queue_after`].
    pub drains_queue: bool,
    /// A synchronous copy API: the host waits for the copy by contract.
    pub sync_api: bool,
    /// Where a collective's arguments are ([`Family::Collective`] only).
    pub nccl: Option<crate::nccl::Layout>,
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
        sync_api: false,
        nccl: None,
    }
}

const fn launch(id: u32, symbol: &'static str) -> ProbeSpec {
    spec(id, symbol, Family::Launch)
}

const fn graph(id: u32, symbol: &'static str) -> ProbeSpec {
    spec(id, symbol, Family::GraphLaunch)
}

/// A copy. `host` is the index of the host pointer where the name fixes one.
const fn copy(id: u32, symbol: &'static str, dir: CopyDir, size: u8, host: Option<u8>, wait: Wait) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Copy);
    s.copy = dir;
    s.size_arg = Some(size);
    s.host_arg = host;
    s.sync_api = !matches!(wait, Wait::Queued);
    s.drains_queue = matches!(wait, Wait::Drains);
    s
}

/// A 2D/3D copy: its direction, pointers and size are read from the struct at entry, so
/// the spec names no argument but the byte count's slot.
const fn struct_copy(id: u32, symbol: &'static str, dir: CopyDir, wait: Wait) -> ProbeSpec {
    copy(id, symbol, dir, crate::cuda::slot::BYTES as u8, None, wait)
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

/// `cuMemMap(ptr, size, offset, handle, flags)` / `cuMemUnmap(ptr, size)`: the address at
/// argument 0, the size at argument 1.
const fn vmm(id: u32, symbol: &'static str, family: Family) -> ProbeSpec {
    let mut s = spec(id, symbol, family);
    s.addr_arg = Some(0);
    s.size_arg = Some(1);
    s
}

/// An NCCL collective or point-to-point call (`Family::Collective`), its arguments where
/// `layout` says.
const fn collective(id: u32, symbol: &'static str, layout: crate::nccl::Layout) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Collective);
    s.nccl = Some(layout);
    s
}

const fn comm(id: u32, symbol: &'static str, out: Option<u8>) -> ProbeSpec {
    let mut s = spec(id, symbol, Family::Comm);
    s.out_arg = out;
    s
}

/// A caching allocator's report of a block (`Family::Block`): the program is `program` (the
/// symbol is found by its demangled name: [`ALLOCATOR_SYMBOLS`]); the address at argument 0,
/// the signed size at argument 1.
const fn block(id: u32, program: &'static str) -> ProbeSpec {
    let mut s = spec(id, program, Family::Block);
    s.addr_arg = Some(0);
    s.size_arg = Some(1);
    s
}

use CopyDir::{DeviceToDevice as D2D, DeviceToHost as D2H, FromStruct2D, FromStruct3D, HostToDevice as H2D, Infer, Peer};
use Wait::{Blocks, Drains, Queued};

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
    // cuMemcpyPeer(dst, dstCtx, src, srcCtx, bytes). Synchronous D→H forms drain the queue.
    copy(16, "cuMemcpyHtoD_v2", H2D, 2, Some(1), Blocks),
    copy(17, "cuMemcpyDtoH_v2", D2H, 2, Some(0), Drains),
    copy(18, "cuMemcpyDtoD_v2", D2D, 2, None, Blocks),
    copy(19, "cuMemcpyHtoDAsync_v2", H2D, 2, Some(1), Queued),
    copy(20, "cuMemcpyHtoDAsync_v2_ptsz", H2D, 2, Some(1), Queued),
    copy(21, "cuMemcpyDtoHAsync_v2", D2H, 2, Some(0), Queued),
    copy(22, "cuMemcpyDtoHAsync_v2_ptsz", D2H, 2, Some(0), Queued),
    copy(23, "cuMemcpyDtoDAsync_v2", D2D, 2, None, Queued),
    copy(24, "cuMemcpyDtoDAsync_v2_ptsz", D2D, 2, None, Queued),
    copy(25, "cuMemcpy", Infer, 2, None, Blocks),
    copy(26, "cuMemcpyAsync", Infer, 2, None, Queued),
    copy(27, "cuMemcpyAsync_ptsz", Infer, 2, None, Queued),
    copy(28, "cuMemcpyPeer", Peer, 4, None, Blocks),
    copy(29, "cuMemcpyPeerAsync", Peer, 4, None, Queued),
    copy(30, "cuMemcpyHtoD_v2_ptds", H2D, 2, Some(1), Blocks),
    copy(31, "cuMemcpyDtoH_v2_ptds", D2H, 2, Some(0), Drains),
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
    // 2D/3D copies. cuMemcpy2D_v2(const CUDA_MEMCPY2D*), cuMemcpy2DUnaligned_v2(same),
    // cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D*, CUstream), cuMemcpy3D_v2(const CUDA_MEMCPY3D*),
    // cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D*, CUstream). cuda.h maps the synchronous ones
    // to `_ptds` and the async ones to `_ptsz` under per-thread default streams; libcuda
    // exports both names.
    struct_copy(64, "cuMemcpy2D_v2", FromStruct2D, Blocks),
    struct_copy(65, "cuMemcpy2D_v2_ptds", FromStruct2D, Blocks),
    struct_copy(66, "cuMemcpy2DUnaligned_v2", FromStruct2D, Blocks),
    struct_copy(67, "cuMemcpy2DUnaligned_v2_ptds", FromStruct2D, Blocks),
    struct_copy(68, "cuMemcpy2DAsync_v2", FromStruct2D, Queued),
    struct_copy(69, "cuMemcpy2DAsync_v2_ptsz", FromStruct2D, Queued),
    struct_copy(70, "cuMemcpy3D_v2", FromStruct3D, Blocks),
    struct_copy(71, "cuMemcpy3D_v2_ptds", FromStruct3D, Blocks),
    struct_copy(72, "cuMemcpy3DAsync_v2", FromStruct3D, Queued),
    struct_copy(73, "cuMemcpy3DAsync_v2_ptsz", FromStruct3D, Queued),
    // Virtual memory management (PyTorch's expandable segments). cuMemMap(CUdeviceptr ptr,
    // size_t size, size_t offset, CUmemGenericAllocationHandle h, unsigned long long flags);
    // cuMemUnmap(CUdeviceptr ptr, size_t size). cuMemCreate/cuMemRelease stay with Alloc/Free.
    vmm(80, "cuMemMap", Family::Map),
    vmm(81, "cuMemUnmap", Family::Unmap),
    // PyTorch's caching allocator, through its profiler hook in libc10.so
    // (`ALLOCATOR_SYMBOLS`): reportMemoryUsageToProfiler(void* ptr, int64_t alloc_size,
    // size_t total_allocated, size_t total_reserved, c10::Device device), with a positive
    // size when a block is handed out and a negative one when it is given back.
    block(84, "c10_report_memory"),
    // NCCL (`libnccl.so.2`), by the names the job calls; the library defines each as a weak
    // alias of its `pnccl*` twin, where user space finds it if the alias is missing.
    // `ncclGroupStart` only opens a group; ids 85-95 are the last below PROBE_SLOTS.
    collective(85, "ncclAllReduce", crate::nccl::ALL_REDUCE),
    collective(86, "ncclAllGather", crate::nccl::ALL_GATHER),
    collective(87, "ncclReduceScatter", crate::nccl::REDUCE_SCATTER),
    collective(88, "ncclBroadcast", crate::nccl::BROADCAST),
    collective(89, "ncclReduce", crate::nccl::REDUCE),
    collective(90, "ncclSend", crate::nccl::SEND),
    collective(91, "ncclRecv", crate::nccl::RECV),
    comm(92, "ncclGroupEnd", None),
    comm(93, "ncclCommInitRank", Some(crate::nccl::init::COMM_OUT as u8)),
    comm(94, "ncclCommInitRankConfig", Some(crate::nccl::init::COMM_OUT as u8)),
    comm(95, "ncclCommDestroy", None),
];

/// Where collective `id`'s arguments are, `None` for every other probe (compile-time helper
/// for eBPF).
#[must_use]
pub const fn nccl_layout(id: u32) -> Option<crate::nccl::Layout> {
    match spec_of(id) {
        Some(s) => s.nccl,
        None => None,
    }
}

/// The caching allocators' functions gputrace probes, by the demangled name and signature
/// their library's symbol table gives them, and the program of [`PROBES`] each takes. A
/// library where the name with this exact signature is missing is not probed (a changed
/// signature would make the arguments read wrong). PyTorch's native caching allocator calls
/// its profiler hook on every block it hands out and takes back (its cudaMallocAsync backend
/// does not, in torch 2.11); the hook is exported by libc10.so, so it is called across libraries and
/// never inlined (its own allocator functions in `libc10_cuda.so` are: `free` is inlined into
/// its callers in torch 2.11, docs/validation.md).
pub const ALLOCATOR_SYMBOLS: [(&str, &str); 1] = [("c10::reportMemoryUsageToProfiler(void*, long, unsigned long, unsigned long, c10::Device)", "c10_report_memory")];

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

/// Whether a call's record must reach user space at once rather than with the next batch:
/// copies, whose host memory user space classifies from the process's live memory map — a
/// record read after the memory was unmapped or the process exited can no longer be
/// classified (compile-time helper for eBPF).
#[must_use]
pub const fn needs_prompt_delivery(id: u32) -> bool {
    match spec_of(id) {
        // Copies: their host memory is classified while the process lives. Allocations: the
        // Python reader reads the allocating line while the thread is still there.
        Some(s) => matches!(s.family, Family::Copy | Family::Alloc),
        None => false,
    }
}

/// At most one prompt block record per process this often: blocks come at a tensor's rate
/// (thousands a second), and their Python line is read for at most ~100 a second, each only
/// soon after its call.
pub const BLOCK_PROMPT_EVERY_NS: u64 = 10_000_000;

/// Whether probe `id` has a return program: not launches (counted at entry) nor a caching
/// allocator's reports (entry only, `Family::Block`).
#[must_use]
pub const fn has_return_program(id: u32) -> bool {
    match spec_of(id) {
        Some(s) => !matches!(s.family, Family::Launch | Family::GraphLaunch | Family::Block),
        None => false,
    }
}



/// Whether a call's prompt delivery is needed only the first time its memory is seen:
/// copies. User space keeps each process's memory map once read, so a copy between regions
/// it has classified before is classified from that map even after the process is gone;
/// only a copy touching a region not seen before must reach it while the memory is mapped.
/// (Allocations are prompt while stacks are taken: their Python line is read while the
/// thread is there.)
#[must_use]
pub const fn prompt_on_first_sight(id: u32) -> bool {
    match spec_of(id) {
        Some(s) => matches!(s.family, Family::Copy),
        None => false,
    }
}

/// Whether the entry of probe `id` takes its caller's user stack into
/// `args[cuda::slot::ALLOC_STACK]`: device allocations (compile-time helper for eBPF).
#[must_use]
pub const fn takes_alloc_stack(id: u32) -> bool {
    match spec_of(id) {
        Some(s) => matches!(s.family, Family::Alloc),
        None => false,
    }
}

// The allocation stack slot is free in every allocation's arguments.
const _: () = {
    let mut i = 0;
    while i < PROBES.len() {
        let s = &PROBES[i];
        if matches!(s.family, Family::Alloc) {
            assert!(matches!(s.out_arg, Some(a) if (a as usize) < crate::cuda::slot::ALLOC_STACK));
            assert!(matches!(s.size_arg, Some(a) if (a as usize) < crate::cuda::slot::ALLOC_STACK));
        }
        i += 1;
    }
};

/// Whether `id` is the probe of `symbol` in [`PROBES`] (compile-time check that each eBPF
/// program is built with its symbol's id).
#[must_use]
pub const fn is_probe(id: u32, symbol: &str) -> bool {
    let Some(spec) = spec_of(id) else { return false };
    let (a, b) = (spec.symbol.as_bytes(), symbol.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether the call's return left the device queue drained, given the arguments its entry
/// saved: [`ProbeSpec::drains_queue`], or for a synchronous 2D/3D copy, whether it copied
/// device memory to the host ([`crate::cuda::device_to_host`]). The kernel side decides with
/// this when to start a queue-idle period, user space with the same function, so both agree.
#[must_use]
pub const fn drains_queue_after(id: u32, args: &[u64; CALL_ARGS]) -> bool {
    match spec_of(id) {
        Some(s) if s.drains_queue => true,
        Some(s) if s.sync_api && s.copy.from_struct() => crate::cuda::device_to_host(args),
        _ => false,
    }
}

/// Whether the call's entry takes the caller's stack, for the samples and off-CPU spells of
/// the wait inside it ([`crate::host::CallStack`]): a call that drains the queue, or a copy
/// that brings (or may bring: unified addresses) device memory to the host.
#[must_use]
pub const fn takes_call_stack(id: u32, args: &[u64; CALL_ARGS]) -> bool {
    match spec_of(id) {
        Some(s) if s.drains_queue => true,
        Some(s) => match s.copy {
            CopyDir::DeviceToHost | CopyDir::Infer => true,
            CopyDir::FromStruct2D | CopyDir::FromStruct3D => crate::cuda::device_to_host(args),
            _ => false,
        },
        None => false,
    }
}

/// Struct layout a 2D/3D copy probe reads at entry, `None` for every other probe
/// (compile-time helper for eBPF).
#[must_use]
pub const fn copy_layout(id: u32) -> Option<&'static CopyLayout> {
    match spec_of(id) {
        Some(s) => s.copy.layout(),
        None => None,
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

/// What the overhead budget takes off in its off phases (`--max-overhead`).
///
/// Launch probes go first: they are the hottest, entry only, and what they count scales to
/// the window from the calls around them. Where calls alone cost more than the budget (a
/// loop of `.item()`: a copy and a sync, four traps a step), copies, memsets and
/// synchronizes go too. Allocation, pinning and context probes never do: a free unseen
/// would read as a leak, a pin unseen as pageable memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shed {
    /// Kernel and graph launches.
    Launches,
    /// Launches, and copies, memsets and synchronizes.
    LaunchesAndCalls,
}

impl Shed {
    /// Whether this level takes `spec` off.
    #[must_use]
    pub const fn takes(self, spec: &ProbeSpec) -> bool {
        match spec.family {
            Family::Launch | Family::GraphLaunch => true,
            Family::Copy | Family::Memset | Family::Sync => matches!(self, Self::LaunchesAndCalls),
            _ => false,
        }
    }

    /// Whether some level takes `spec` off.
    #[must_use]
    pub const fn may_take(spec: &ProbeSpec) -> bool {
        Self::LaunchesAndCalls.takes(spec)
    }

    /// Whether some level takes probe `id` off (false for an id not in [`PROBES`]).
    #[must_use]
    pub const fn may_take_id(id: u32) -> bool {
        match spec_of(id) {
            Some(spec) => Self::may_take(spec),
            None => false,
        }
    }
}
