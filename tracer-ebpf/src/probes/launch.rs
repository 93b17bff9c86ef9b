#![expect(non_snake_case, reason = "each program is named after the CUDA symbol it hooks")]
//! Launch probes: the hottest path of a traced job, so each hit is one map lookup in
//! `TRACED`, one in `THREADS` and an increment — no event, no return probe. The only record
//! written is the rare "first launch after the queue was drained" (see `IdleEndEvent`).

use aya_ebpf::helpers::bpf_ktime_get_ns;
use gputrace_common::{is_probe, loss, EventHeader, IdleEndEvent, KIND_IDLE_END};

use crate::maps::{count_loss, cuda_caller, thread_counters, EVENTS};

#[inline(always)]
fn on_launch(probe: u32) -> u32 {
    let Some(cur) = cuda_caller() else { return 0 };
    let Some(counters) = thread_counters(&cur) else { return 0 };
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: `counters` points at this thread's own map entry; no other CPU writes it.
    let drained_at_ns = unsafe {
        (*counters).hits[probe as usize] += 1;
        // When the CPU sampler next finds the thread in host code, how long ago it launched
        // says whether that code is the launch stream's dispatch (`launch_age`).
        (*counters).last_launch_ns = now;
        core::mem::replace(&mut (*counters).drained_at_ns, 0)
    };
    if drained_at_ns != 0 {
        let Some(mut entry) = EVENTS.reserve::<IdleEndEvent>(0) else {
            count_loss(loss::RING_FULL);
            return 0;
        };
        entry.write(IdleEndEvent {
            header: EventHeader { kind: KIND_IDLE_END, probe, tgid: cur.tgid, tid: cur.tid, ts_ns: now },
            drained_at_ns,
        });
        entry.submit(crate::maps::batched_submit());
    }
    0
}

/// One entry program per launch symbol; the id is a constant so the verifier sees a fixed
/// array index.
macro_rules! launch_probes {
    ($($symbol:ident = $id:literal;)*) => {$(
        uprobe_pair! {
            entry $symbol(_ctx) {
                const _: () = assert!(is_probe($id, stringify!($symbol)), "id and symbol disagree with PROBES");
                on_launch($id)
            }
        }
    )*};
}

launch_probes! {
    cuLaunchKernel = 1;
    cuLaunchKernel_ptsz = 2;
    cuLaunchKernelEx = 3;
    cuLaunchKernelEx_ptsz = 4;
    cuLaunchCooperativeKernel = 5;
    cuLaunchCooperativeKernel_ptsz = 6;
    cuGraphLaunch = 8;
    cuGraphLaunch_ptsz = 9;
}
