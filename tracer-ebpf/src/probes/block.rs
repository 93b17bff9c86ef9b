//! Block I/O of the traced tree, attributed at submission — the completion runs in interrupt
//! context, where the current task is whoever was interrupted.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use gputrace_common::{loss, EventHeader, IoEvent, IoKey, IoStart, KIND_IO};

use super::layout::layout;
use crate::maps::{count_loss, traced_current, EVENTS, IO_INFLIGHT};

/// Remember a request submitted by a traced thread. Called from io_start, insert and issue:
/// whichever runs in the submitter's context first wins (issue may run in a kworker).
#[inline(always)]
fn on_submit(ctx: &TracePointContext) -> u32 {
    let Some(cur) = traced_current() else { return 0 };
    let l = layout();
    // SAFETY: offsets from the tracepoint's format; bpf_probe_read checks bounds.
    let (dev, sector, bytes, rwbs) = unsafe {
        (
            ctx.read_at::<u32>(l.rq_dev as usize).unwrap_or(0),
            ctx.read_at::<u64>(l.rq_sector as usize).unwrap_or(0),
            ctx.read_at::<u32>(l.rq_bytes as usize).unwrap_or(0),
            ctx.read_at::<u32>(l.rq_rwbs as usize).unwrap_or(0),
        )
    };
    let key = IoKey { dev, _reserved: 0, sector };
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

#[tracepoint]
pub fn block_rq_insert(ctx: TracePointContext) -> u32 {
    on_submit(&ctx)
}

#[tracepoint]
pub fn block_rq_issue(ctx: TracePointContext) -> u32 {
    on_submit(&ctx)
}

/// Where a request starts being accounted (kernel 6.5 and later): always in the submitter's
/// context. Without a scheduler (`none`, common on NVMe and virtio) no insert fires, and a
/// request the hardware queue could not take at once is issued later by a kernel worker, so
/// neither insert nor issue would see the job's thread.
#[tracepoint]
pub fn block_io_start(ctx: TracePointContext) -> u32 {
    on_submit(&ctx)
}

#[tracepoint]
pub fn block_rq_complete(ctx: TracePointContext) -> u32 {
    let l = layout();
    // SAFETY: offsets from the tracepoint's format.
    let (dev, sector, nr_sector, error) = unsafe {
        (
            ctx.read_at::<u32>(l.done_dev as usize).unwrap_or(0),
            ctx.read_at::<u64>(l.done_sector as usize).unwrap_or(0),
            ctx.read_at::<u32>(l.done_nr_sector as usize).unwrap_or(0),
            ctx.read_at::<i32>(l.done_error as usize).unwrap_or(0),
        )
    };
    let key = IoKey { dev, _reserved: 0, sector };
    // SAFETY: copied out before removal.
    let Some(start) = (unsafe { IO_INFLIGHT.get(&key) }).copied() else { return 0 };
    let _ = IO_INFLIGHT.remove(&key);
    let Some(mut entry) = EVENTS.reserve::<IoEvent>(0) else {
        count_loss(loss::RING_FULL);
        return 0;
    };
    // The completion's sector count covers every bio merged into the request.
    let bytes = if nr_sector > 0 { nr_sector.saturating_mul(512) } else { start.bytes };
    entry.write(IoEvent {
        // SAFETY: reading the monotonic clock has no preconditions.
        header: EventHeader { kind: KIND_IO, probe: 0, tgid: start.tgid, tid: start.tid, ts_ns: unsafe { bpf_ktime_get_ns() } },
        start_ns: start.start_ns,
        dev,
        bytes,
        rwbs: start.rwbs,
        error,
    });
    entry.submit(crate::maps::batched_submit());
    0
}
