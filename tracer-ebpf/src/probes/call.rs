#![expect(non_snake_case, reason = "each program is named after the CUDA symbol it hooks")]
//! Call probes: the entry remembers the arguments and the time; the return writes one
//! `CallEvent` with the duration, the result and, for allocations, the address returned.
//! These calls are rare next to launches (copies, syncs, allocations), so a record each is
//! affordable and keeps the decoding in user space, where it can be tested.
//!
//! Most entries save the raw integer arguments. 2D/3D copies pass a pointer to a struct in
//! the caller's memory instead; their entry (`struct_copy_probes!`) reads the few fields it
//! needs from that struct, since the caller may reuse it once the call returns.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_user},
    macros::map,
    maps::LruHashMap,
    programs::{tracing::StackIdContext as _, ProbeContext, RetProbeContext},
};
use aya_log_ebpf::debug;
use gputrace_common::{
    call_epoch, copy_layout,
    host::launch_age,
    cuda::{memory_type, slot, CopyLayout},
    drains_queue_after, is_probe, loss, nccl, nccl_layout, out_arg, stack_source, takes_call_stack, CallEvent, EventHeader, InflightCall, ThreadCounters, CALL_ARGS,
    KIND_CALL,
};

use crate::{
    maps::{call_epoch as current_call_epoch, copy_region_is_new, count_loss, cuda_caller, python_read, returns_probed, stacks_on, thread_counters, Current, ALLOC_STACKS, BPF_F_USER_STACK, EVENTS, THREADS, USER_STACKS},
    python_frames::{self, Capture},
    stack_copy::{copy_user_stack, remember_return, take_call_stack},
};

/// Count the hit and remember the call for its return, in the thread's counters `c`: in the
/// slot this probe's last call left (a call whose return never came), else a free one, else
/// over the older of the two (counted as lost). `sheddable`: the overhead budget may take
/// this probe off; its slot is then taken in the current call epoch, and while the budget
/// has such probes off, none is taken (`gputrace_common::call_epoch`).
#[inline(always)]
fn remember(c: Option<*mut ThreadCounters>, probe: u32, args: [u64; CALL_ARGS], sheddable: bool) {
    // No counters: the thread map was full, counted as such (`thread_counters`).
    let Some(c) = c else { return };
    // SAFETY: this thread's own entry; no other CPU writes it.
    unsafe { (*c).hits[probe as usize] += 1 };
    if !returns_probed() {
        return;
    }
    let current = current_call_epoch();
    if sheddable && current & call_epoch::OFF != 0 {
        return;
    }
    // SAFETY: reading the monotonic clock has no preconditions.
    let call = InflightCall { start_ns: unsafe { bpf_ktime_get_ns() }, args };
    // SAFETY: this thread's own entry; no other CPU writes it.
    unsafe {
        let [a, b] = &mut (*c).inflight;
        let slot = if a.probe == probe {
            a
        } else if b.probe == probe {
            b
        } else if !a.live(current) {
            a
        } else if !b.live(current) {
            b
        } else {
            count_loss(loss::INFLIGHT_FULL);
            if a.call.start_ns <= b.call.start_ns { a } else { b }
        };
        // Inside a call until its return frees the slot (the scheduler side reads it to tell
        // a wait inside CUDA from one outside). The probe first: a CPU sample between the two
        // stores tags the call it is in.
        (*c).call_probe = probe as u16;
        slot.probe = probe;
        slot.epoch = if sheddable { current } else { call_epoch::NEVER };
        slot.call = call;
    }
}

/// The call `probe` the thread `c` is returning from, its slot freed; None where its entry
/// was not seen (attached mid-call, or entered before the overhead budget took its probes
/// off) or was overwritten.
#[inline(always)]
fn recall(c: *mut ThreadCounters, probe: u32) -> Option<InflightCall> {
    // SAFETY: this thread's own entry; no other CPU writes it.
    unsafe {
        let [a, b] = &mut (*c).inflight;
        let slot = if a.probe == probe {
            a
        } else if b.probe == probe {
            b
        } else {
            return None;
        };
        let live = slot.live(current_call_epoch());
        slot.probe = 0;
        live.then_some(slot.call)
    }
}

/// The call's first `CALL_ARGS` integer arguments, 0 where one cannot be read.
#[inline(always)]
fn raw_args(ctx: &ProbeContext) -> [u64; CALL_ARGS] {
    let mut args = [0; CALL_ARGS];
    let mut i = 0;
    while i < CALL_ARGS {
        args[i] = ctx.arg::<u64>(i).unwrap_or(0);
        i += 1;
    }
    args
}

/// `alloc_stack`: a device allocation, whose caller's user stack id replaces its unused last
/// argument (`slot::ALLOC_STACK`), when stacks are on.
#[inline(always)]
fn on_enter(ctx: &ProbeContext, probe: u32, alloc_stack: bool, sheddable: bool) -> u32 {
    let Some(cur) = cuda_caller() else { return 0 };
    let counters = thread_counters(&cur);
    let mut args = raw_args(ctx);
    note_entry(ctx, &cur, counters, probe, &args);
    if alloc_stack {
        args[slot::ALLOC_STACK] = if stacks_on() {
            // The helper walks the user stack with its own checked reads.
            let fp_stack_id = ctx.get_stackid(&ALLOC_STACKS, BPF_F_USER_STACK).unwrap_or(-1);
            // The copy's id where there is one (user space swaps it for the stack it
            // unwinds to before the call is counted), else the frame-pointer stack's.
            copy_user_stack(&cur, stack_source::ALLOC, launch_age::UNKNOWN, probe, fp_stack_id).unwrap_or(fp_stack_id as u64)
        } else {
            u64::MAX
        };
    }
    remember(counters, probe, args, sheddable);
    0
}

/// Where this call's return address is, for stacks copied inside it (`remember_return`),
/// and for a sync or a device-to-host copy, the caller's stack (`take_call_stack`); only
/// when stacks are taken.
#[inline(always)]
fn note_entry(ctx: &ProbeContext, cur: &Current, counters: Option<*mut ThreadCounters>, probe: u32, args: &[u64; CALL_ARGS]) {
    let Some(c) = counters.filter(|_| stacks_on()) else { return };
    // SAFETY: the probe context's registers are the traced thread's at the call's entry.
    let sp = unsafe { (*ctx.regs).rsp };
    let ret = remember_return(c, sp);
    if takes_call_stack(probe, args) {
        // The helper walks the user stack with its own checked reads.
        take_call_stack(cur, c, probe, sp, ret, || ctx.get_stackid(&USER_STACKS, BPF_F_USER_STACK).unwrap_or(-1));
    }
}

/// One field of a struct in the traced process; 0 if it cannot be read.
#[inline(always)]
fn user_field<T: Into<u64>>(base: u64, offset: u64) -> u64 {
    // SAFETY: bpf_probe_read_user checks the address; a bad pointer just fails.
    unsafe { bpf_probe_read_user(base.wrapping_add(offset) as *const T) }.map_or(0, Into::into)
}

/// One field of a struct in the traced process, or the address that could not be read and
/// the helper's error.
#[inline(always)]
fn try_user_field<T: Into<u64>>(base: u64, offset: u64) -> Result<u64, (u64, i32)> {
    let at = base.wrapping_add(offset);
    // SAFETY: bpf_probe_read_user checks the address; a bad pointer just fails.
    unsafe { bpf_probe_read_user(at as *const T) }.map(Into::into).map_err(|e| (at, e))
}

/// Entry of a 2D/3D copy: reads its `CUDA_MEMCPY2D`/`CUDA_MEMCPY3D` field by field (the
/// structs are 128 and 200 bytes; only seven fields are needed, so nothing big lands on the
/// 512-byte stack) into the slots of `gputrace_common::cuda::slot`. Each end's pointer is the
/// one its memory type names: the host pointer for host memory, else the device pointer
/// (which also carries unified addresses). An unreadable struct leaves memory types 0, which
/// user space reads as "decide from the pointers".
#[inline(always)]
fn on_enter_struct_copy(ctx: &ProbeContext, probe: u32, symbol: &str, layout: &CopyLayout, sheddable: bool) -> u32 {
    let Some(cur) = cuda_caller() else { return 0 };
    let base = ctx.arg::<u64>(0).unwrap_or(0);
    // The first field says whether the struct can be read at all; a counter could only say
    // that it could not (user space reads the zeros as "decide from the pointers").
    let src_type = match try_user_field::<u32>(base, layout.src_type) {
        Ok(v) => v,
        Err((at, e)) => {
            debug!(ctx, "{}: the copy's parameters could not be read at 0x{:x} (error {})", symbol, at, e);
            0
        }
    };
    let dst_type = user_field::<u32>(base, layout.dst_type);
    let src_at = if src_type == memory_type::HOST { layout.src_host } else { layout.src_device };
    let dst_at = if dst_type == memory_type::HOST { layout.dst_host } else { layout.dst_device };
    let mut bytes = user_field::<u64>(base, layout.width).wrapping_mul(user_field::<u64>(base, layout.height));
    if let Some(depth) = layout.depth {
        bytes = bytes.wrapping_mul(user_field::<u64>(base, depth));
    }
    let mut args = [0; CALL_ARGS];
    args[slot::SRC_TYPE] = src_type;
    args[slot::SRC_PTR] = user_field::<u64>(base, src_at);
    args[slot::DST_TYPE] = dst_type;
    args[slot::DST_PTR] = user_field::<u64>(base, dst_at);
    args[slot::BYTES] = bytes;
    let counters = thread_counters(&cur);
    note_entry(ctx, &cur, counters, probe, &args);
    remember(counters, probe, args, sheddable);
    0
}

#[inline(always)]
/// `prompt`: wake the reader for this record (see `needs_prompt_delivery`); `first_sight`:
/// only when its memory regions are new (see `prompt_on_first_sight`).
fn on_return(ctx: &RetProbeContext, probe: u32, symbol: &str, prompt: bool, first_sight: bool) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // Only threads whose calls passed the traced-process filter have counters.
    let counters = THREADS.get_ptr_mut(&tid);
    let Some(call) = counters.and_then(|c| recall(c, probe)) else {
        // Untraced processes also land here; only count it for traced ones.
        if cuda_caller().is_some() {
            count_loss(loss::UNMATCHED_RETURN);
        }
        return 0;
    };
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };

    let out_index = out_arg(probe);
    let out = if (out_index as usize) < CALL_ARGS {
        let ptr = call.args[out_index as usize] as *const u64;
        // SAFETY: bpf_probe_read_user checks the address; a bad pointer just fails.
        match unsafe { bpf_probe_read_user(ptr) } {
            Ok(out) => out,
            Err(e) => {
                debug!(ctx, "{}: its result could not be read at 0x{:x} (error {})", symbol, ptr as u64, e);
                0
            }
        }
    } else {
        0
    };

    if drains_queue_after(probe, &call.args) {
        if let Some(c) = counters {
            // SAFETY: this thread's own entry.
            unsafe { (*c).drained_at_ns = now };
        }
    }

    let Some(mut entry) = EVENTS.reserve::<CallEvent>(0) else {
        count_loss(loss::RING_FULL);
        count_loss(loss::RING_FULL_CALLS);
        return 0;
    };
    entry.write(CallEvent {
        header: EventHeader { kind: KIND_CALL, probe, tgid, tid, ts_ns: now },
        start_ns: call.start_ns,
        args: call.args,
        ret: ctx.ret::<u64>(),
        out,
    });
    // Copies need the prompt wakeup only for memory user space has not classified yet;
    // allocations only while stacks are taken, in a process whose Python line is read beside
    // them.
    let prompt = prompt && if first_sight { copy_region_is_new(tgid, call.args[0], call.args[1], call.args[3]) } else { stacks_on() && python_read(tgid) };
    entry.submit(if prompt { crate::maps::FORCE_WAKEUP } else { crate::maps::batched_submit() });
    0
}

/// An entry program named after the symbol and a return program named `<symbol>_ret`.
macro_rules! call_probes {
    ($($symbol:ident / $ret:ident = $id:literal;)*) => {$(
        uprobe_pair! {
            entry $symbol(ctx) {
                const _: () = assert!(is_probe($id, stringify!($symbol)), "id and symbol disagree with PROBES");
                const ALLOC_STACK: bool = gputrace_common::takes_alloc_stack($id);
                const SHEDDABLE: bool = gputrace_common::Shed::may_take_id($id);
                on_enter(&ctx, $id, ALLOC_STACK, SHEDDABLE)
            }
        }

        uprobe_pair! {
            ret $ret(ctx) {
                const PROMPT: bool = gputrace_common::needs_prompt_delivery($id);
                const FIRST_SIGHT: bool = gputrace_common::prompt_on_first_sight($id);
                on_return(&ctx, $id, stringify!($symbol), PROMPT, FIRST_SIGHT)
            }
        }
    )*};
}

/// As `call_probes!`, for 2D/3D copies: the entry reads the copy's parameter struct. The
/// layout comes from the probe table at compile time; an id that is not a struct copy there
/// fails the build.
macro_rules! struct_copy_probes {
    ($($symbol:ident / $ret:ident = $id:literal;)*) => {$(
        uprobe_pair! {
            entry $symbol(ctx) {
                const _: () = assert!(is_probe($id, stringify!($symbol)), "id and symbol disagree with PROBES");
                const LAYOUT: &CopyLayout = match copy_layout($id) {
                    Some(layout) => layout,
                    None => panic!("not a 2D/3D copy in gputrace_common::PROBES"),
                };
                const SHEDDABLE: bool = gputrace_common::Shed::may_take_id($id);
                on_enter_struct_copy(&ctx, $id, stringify!($symbol), LAYOUT, SHEDDABLE)
            }
        }

        uprobe_pair! {
            ret $ret(ctx) {
                const PROMPT: bool = gputrace_common::needs_prompt_delivery($id);
                const FIRST_SIGHT: bool = gputrace_common::prompt_on_first_sight($id);
                on_return(&ctx, $id, stringify!($symbol), PROMPT, FIRST_SIGHT)
            }
        }
    )*};
}

/// Argument `position` (0-based) of the call at its entry: a register for the first six, else
/// the stack above the return address (x86-64); 0 where the call has none or it cannot be
/// read.
#[inline(always)]
fn arg_at(ctx: &ProbeContext, position: u8) -> u64 {
    if position == nccl::NONE {
        return 0;
    }
    if position < 6 {
        return ctx.arg::<u64>(usize::from(position)).unwrap_or(0);
    }
    // SAFETY: the probe context's registers are the traced thread's at the call's entry.
    let sp = unsafe { (*ctx.regs).rsp };
    user_field::<u64>(sp, 8 * (u64::from(position) - 5))
}

/// Entry of a NCCL collective: its count, datatype, reduction/root/peer, communicator and
/// stream, wherever its signature puts them, into the slots of `gputrace_common::nccl::slot`.
#[inline(always)]
fn on_enter_collective(ctx: &ProbeContext, probe: u32, layout: &nccl::Layout) -> u32 {
    let Some(cur) = cuda_caller() else { return 0 };
    let mut args = [0; CALL_ARGS];
    args[nccl::slot::COUNT] = arg_at(ctx, layout.count);
    args[nccl::slot::DATATYPE] = arg_at(ctx, layout.datatype);
    args[nccl::slot::EXTRA] = arg_at(ctx, layout.extra);
    args[nccl::slot::COMM] = arg_at(ctx, layout.comm);
    args[nccl::slot::STREAM] = arg_at(ctx, layout.stream);
    remember(thread_counters(&cur), probe, args, false);
    0
}

/// As `call_probes!`, for NCCL collectives: the entry reads the arguments where the probe
/// table's layout says; an id that is not a collective there fails the build.
macro_rules! collective_probes {
    ($($symbol:ident / $ret:ident = $id:literal;)*) => {$(
        uprobe_pair! {
            entry $symbol(ctx) {
                const _: () = assert!(is_probe($id, stringify!($symbol)), "id and symbol disagree with PROBES");
                const LAYOUT: nccl::Layout = match nccl_layout($id) {
                    Some(layout) => layout,
                    None => panic!("not a collective in gputrace_common::PROBES"),
                };
                const _: () = assert!(!gputrace_common::Shed::may_take_id($id), "collectives are never shed");
                on_enter_collective(&ctx, $id, &LAYOUT)
            }
        }

        uprobe_pair! {
            ret $ret(ctx) {
                on_return(&ctx, $id, stringify!($symbol), false, false)
            }
        }
    )*};
}

collective_probes! {
    ncclAllReduce / ncclAllReduce_ret = 85;
    ncclAllGather / ncclAllGather_ret = 86;
    ncclReduceScatter / ncclReduceScatter_ret = 87;
    ncclBroadcast / ncclBroadcast_ret = 88;
    ncclReduce / ncclReduce_ret = 89;
    ncclSend / ncclSend_ret = 90;
    ncclRecv / ncclRecv_ret = 91;
}

// Ids and symbols: gputrace_common::probe::PROBES. Each program checks its id against the
// table at compile time; user space loads a program by each symbol's name, so a missing
// one fails at load.
call_probes! {
    cuMemcpyHtoD_v2 / cuMemcpyHtoD_v2_ret = 16;
    cuMemcpyDtoH_v2 / cuMemcpyDtoH_v2_ret = 17;
    cuMemcpyDtoD_v2 / cuMemcpyDtoD_v2_ret = 18;
    cuMemcpyHtoDAsync_v2 / cuMemcpyHtoDAsync_v2_ret = 19;
    cuMemcpyHtoDAsync_v2_ptsz / cuMemcpyHtoDAsync_v2_ptsz_ret = 20;
    cuMemcpyDtoHAsync_v2 / cuMemcpyDtoHAsync_v2_ret = 21;
    cuMemcpyDtoHAsync_v2_ptsz / cuMemcpyDtoHAsync_v2_ptsz_ret = 22;
    cuMemcpyDtoDAsync_v2 / cuMemcpyDtoDAsync_v2_ret = 23;
    cuMemcpyDtoDAsync_v2_ptsz / cuMemcpyDtoDAsync_v2_ptsz_ret = 24;
    cuMemcpy / cuMemcpy_ret = 25;
    cuMemcpyAsync / cuMemcpyAsync_ret = 26;
    cuMemcpyAsync_ptsz / cuMemcpyAsync_ptsz_ret = 27;
    cuMemcpyPeer / cuMemcpyPeer_ret = 28;
    cuMemcpyPeerAsync / cuMemcpyPeerAsync_ret = 29;
    cuMemcpyHtoD_v2_ptds / cuMemcpyHtoD_v2_ptds_ret = 30;
    cuMemcpyDtoH_v2_ptds / cuMemcpyDtoH_v2_ptds_ret = 31;
    cuMemsetD8_v2 / cuMemsetD8_v2_ret = 32;
    cuMemsetD32_v2 / cuMemsetD32_v2_ret = 33;
    cuMemsetD8Async / cuMemsetD8Async_ret = 34;
    cuMemsetD32Async / cuMemsetD32Async_ret = 35;
    cuCtxSynchronize_v2 / cuCtxSynchronize_v2_ret = 37;
    cuStreamSynchronize / cuStreamSynchronize_ret = 40;
    cuStreamSynchronize_ptsz / cuStreamSynchronize_ptsz_ret = 41;
    cuCtxSynchronize / cuCtxSynchronize_ret = 42;
    cuEventSynchronize / cuEventSynchronize_ret = 43;
    cuMemAlloc_v2 / cuMemAlloc_v2_ret = 44;
    cuMemFree_v2 / cuMemFree_v2_ret = 45;
    cuMemAllocAsync / cuMemAllocAsync_ret = 46;
    cuMemFreeAsync / cuMemFreeAsync_ret = 47;
    cuMemAllocFromPoolAsync / cuMemAllocFromPoolAsync_ret = 48;
    cuMemCreate / cuMemCreate_ret = 49;
    cuMemRelease / cuMemRelease_ret = 50;
    cuMemAllocManaged / cuMemAllocManaged_ret = 51;
    cuMemHostAlloc / cuMemHostAlloc_ret = 52;
    cuMemAllocHost_v2 / cuMemAllocHost_v2_ret = 53;
    cuMemFreeHost / cuMemFreeHost_ret = 54;
    cuMemHostRegister_v2 / cuMemHostRegister_v2_ret = 55;
    cuMemHostUnregister / cuMemHostUnregister_ret = 56;
    cuCtxCreate_v2 / cuCtxCreate_v2_ret = 58;
    cuDevicePrimaryCtxRetain / cuDevicePrimaryCtxRetain_ret = 59;
    cuDevicePrimaryCtxRelease_v2 / cuDevicePrimaryCtxRelease_v2_ret = 60;
    cuCtxDestroy_v2 / cuCtxDestroy_v2_ret = 61;
    cuCtxCreate_v4 / cuCtxCreate_v4_ret = 62;
    cuMemMap / cuMemMap_ret = 80;
    cuMemUnmap / cuMemUnmap_ret = 81;
    ncclGroupEnd / ncclGroupEnd_ret = 92;
    ncclCommInitRank / ncclCommInitRank_ret = 93;
    ncclCommInitRankConfig / ncclCommInitRankConfig_ret = 94;
    ncclCommDestroy / ncclCommDestroy_ret = 95;
}

struct_copy_probes! {
    cuMemcpy2D_v2 / cuMemcpy2D_v2_ret = 64;
    cuMemcpy2D_v2_ptds / cuMemcpy2D_v2_ptds_ret = 65;
    cuMemcpy2DUnaligned_v2 / cuMemcpy2DUnaligned_v2_ret = 66;
    cuMemcpy2DUnaligned_v2_ptds / cuMemcpy2DUnaligned_v2_ptds_ret = 67;
    cuMemcpy2DAsync_v2 / cuMemcpy2DAsync_v2_ret = 68;
    cuMemcpy2DAsync_v2_ptsz / cuMemcpy2DAsync_v2_ptsz_ret = 69;
    cuMemcpy3D_v2 / cuMemcpy3D_v2_ret = 70;
    cuMemcpy3D_v2_ptds / cuMemcpy3D_v2_ptds_ret = 71;
    cuMemcpy3DAsync_v2 / cuMemcpy3DAsync_v2_ret = 72;
    cuMemcpy3DAsync_v2_ptsz / cuMemcpy3DAsync_v2_ptsz_ret = 73;
}

/// When each process's last prompt block record went (LRU: exited processes age out).
#[map]
static BLOCK_PROMPTED: LruHashMap<u32, u64> = LruHashMap::with_max_entries(1024, 0);

/// Whether this block record of process `tgid` should wake the reader at once: the first in
/// `BLOCK_PROMPT_EVERY_NS` (the Python reader reads at most ~100 a second anyway).
#[inline(always)]
fn block_prompt_due(tgid: u32, now: u64) -> bool {
    // SAFETY: the value is copied out.
    let last = unsafe { BLOCK_PROMPTED.get(&tgid) }.copied();
    if last.is_some_and(|t| now.saturating_sub(t) < gputrace_common::BLOCK_PROMPT_EVERY_NS) {
        return false;
    }
    let _ = BLOCK_PROMPTED.insert(&tgid, &now, 0);
    true
}

// PyTorch's caching allocator reporting a block (`c10::reportMemoryUsageToProfiler(void* ptr,
// int64_t alloc_size, size_t total_allocated, size_t total_reserved, c10::Device)`): one
// record at the entry, with the raw arguments, and no return probe. The call returns
// nothing we need, and a return probe replaces the caller's return address with a
// trampoline the C++ unwinder cannot walk: an exception thrown through it (the allocator's
// out-of-memory error) would end the job in `std::terminate`.
uprobe_pair! {
    entry c10_report_memory(ctx) {
        const ID: u32 = 84;
        const _: () = assert!(is_probe(ID, "c10_report_memory") && !gputrace_common::has_return_program(ID), "an entry-only block probe");
        let Some(cur) = cuda_caller() else { return 0 };
        if let Some(c) = thread_counters(&cur) {
            // SAFETY: this thread's own entry; no other CPU writes it.
            unsafe { (*c).hits[ID as usize] += 1 };
        }
        let args = raw_args(&ctx);
        // SAFETY: reading the monotonic clock has no preconditions.
        let now = unsafe { bpf_ktime_get_ns() };
        // A block handed out (a positive size) has its Python line read while the thread is
        // there: in the probe, where the process's interpreter has a layout (its frames go to
        // the ring just before this record, which they name by address and time); else from
        // outside, one a process every `BLOCK_PROMPT_EVERY_NS` waking the reader at once.
        let handed_out = (args[1] as i64) > 0;
        let read_here = handed_out && stacks_on() && python_frames::capture(&cur, now, args[0]) != Capture::NoLayout;
        let prompt = handed_out && !read_here && stacks_on() && block_prompt_due(cur.tgid, now);
        let Some(mut entry) = EVENTS.reserve::<CallEvent>(0) else {
            count_loss(loss::RING_FULL);
            count_loss(loss::RING_FULL_CALLS);
            return 0;
        };
        entry.write(CallEvent { header: EventHeader { kind: KIND_CALL, probe: ID, tgid: cur.tgid, tid: cur.tid, ts_ns: now }, start_ns: now, args, ret: 0, out: 0 });
        entry.submit(if prompt { crate::maps::FORCE_WAKEUP } else { crate::maps::batched_submit() });
        0
    }
}
