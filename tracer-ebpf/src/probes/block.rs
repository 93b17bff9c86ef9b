//! Block I/O of the traced tree, attributed at submission — the completion runs in interrupt
//! context, where the current task is whoever was interrupted. Raw tracepoints: each passes
//! the `struct request`, read where the kernel's BTF places its members.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::raw_tracepoint, programs::RawTracePointContext};
use gputrace_common::{host::rwbs_of_op, loss, EventHeader, IoEvent, IoKey, IoStart, Layout, KIND_IO};

use super::layout::{layout, member};
use crate::maps::{count_loss, traced_current, EVENTS, IO_INFLIGHT};

/// `REQ_OP_DRV_IN` and `REQ_OP_DRV_OUT`: passthrough requests, which the tracepoints give
/// sector 0 (`blk_rq_trace_sector`).
const PASSTHROUGH_OPS: [u32; 2] = [34, 35];

/// What the tracepoints' records say of a request: its device (`MKDEV(major, first_minor)`
/// of its disk, the kernel's encoding), sector, bytes and operation.
#[inline(always)]
fn request(l: &Layout, rq: u64) -> (IoKey, u32, u32) {
    let disk = if l.rq_disk == Layout::NONE {
        member::<u64>(rq, l.rq_q).and_then(|q| member::<u64>(q, l.queue_disk))
    } else {
        member::<u64>(rq, l.rq_disk)
    }
    .unwrap_or(0);
    let dev = match (member::<i32>(disk, l.disk_major), member::<i32>(disk, l.disk_first_minor)) {
        (Some(major), Some(minor)) => ((major as u32) << 20) | (minor as u32 & 0xf_ffff),
        _ => 0,
    };
    let cmd_flags = member::<u32>(rq, l.rq_cmd_flags).unwrap_or(0);
    let passthrough = PASSTHROUGH_OPS.contains(&(cmd_flags & 0xff));
    let sector = if passthrough { 0 } else { member::<u64>(rq, l.rq_sector).unwrap_or(0) };
    let bytes = member::<u32>(rq, l.rq_data_len).unwrap_or(0);
    (IoKey { dev, _reserved: 0, sector }, bytes, rwbs_of_op(cmd_flags))
}

/// Remember a request submitted by a traced thread. Called from io_start, insert and issue:
/// whichever runs in the submitter's context first wins (issue may run in a kworker).
#[inline(always)]
fn on_submit(ctx: &RawTracePointContext) -> u32 {
    let Some(cur) = traced_current() else { return 0 };
    let (key, bytes, rwbs) = request(&layout(), ctx.arg::<u64>(0));
    // SAFETY: presence test only.
    if unsafe { IO_INFLIGHT.get(&key) }.is_some() {
        return 0;
    }
    // SAFETY: reading the monotonic clock has no preconditions.
    let start = IoStart { tgid: cur.tgid, tid: cur.tid, start_ns: unsafe { bpf_ktime_get_ns() }, bytes, rwbs };
    if IO_INFLIGHT.insert(&key, &start, 0).is_err() {
        count_loss(loss::IO_MAP_FULL);
    }
    0
}

#[raw_tracepoint(tracepoint = "block_rq_insert")]
pub fn block_rq_insert(ctx: RawTracePointContext) -> u32 {
    on_submit(&ctx)
}

#[raw_tracepoint(tracepoint = "block_rq_issue")]
pub fn block_rq_issue(ctx: RawTracePointContext) -> u32 {
    on_submit(&ctx)
}

/// Where a request starts being accounted (kernel 6.5 and later): always in the submitter's
/// context. Without a scheduler (`none`, common on NVMe and virtio) no insert fires, and a
/// request the hardware queue could not take at once is issued later by a kernel worker, so
/// neither insert nor issue would see the job's thread.
#[raw_tracepoint(tracepoint = "block_io_start")]
pub fn block_io_start(ctx: RawTracePointContext) -> u32 {
    on_submit(&ctx)
}

/// `block_rq_complete(struct request *rq, blk_status_t error, unsigned int nr_bytes)`.
#[raw_tracepoint(tracepoint = "block_rq_complete")]
pub fn block_rq_complete(ctx: RawTracePointContext) -> u32 {
    let (key, _, _) = request(&layout(), ctx.arg::<u64>(0));
    let error = (ctx.arg::<u64>(1) & 0xff) as i32;
    let nr_bytes = ctx.arg::<u64>(2) as u32;
    // SAFETY: copied out before removal.
    let Some(start) = (unsafe { IO_INFLIGHT.get(&key) }).copied() else { return 0 };
    let _ = IO_INFLIGHT.remove(&key);
    let Some(mut entry) = EVENTS.reserve::<IoEvent>(0) else {
        count_loss(loss::RING_FULL);
        return 0;
    };
    // The completion's byte count covers every bio merged into the request.
    let bytes = if nr_bytes > 0 { nr_bytes } else { start.bytes };
    entry.write(IoEvent {
        // SAFETY: reading the monotonic clock has no preconditions.
        header: EventHeader { kind: KIND_IO, probe: 0, tgid: start.tgid, tid: start.tid, ts_ns: unsafe { bpf_ktime_get_ns() } },
        start_ns: start.start_ns,
        dev: key.dev,
        bytes,
        rwbs: start.rwbs,
        error,
    });
    entry.submit(crate::maps::batched_submit());
    0
}
