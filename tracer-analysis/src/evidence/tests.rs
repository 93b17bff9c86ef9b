//! Evidence from synthetic events: how 2D/3D copies are read from the fields their probe
//! saved, and how virtual-memory mappings are counted.

use gputrace_common::{
    cuda::memory_type::{ARRAY, DEVICE, HOST, UNIFIED},
    CallEvent, EventHeader, CALL_ARGS, KIND_CALL, PROBES,
};

use super::*;

const PID: u32 = 7;
const TID: u32 = 8;
/// Host memory the fake process maps as ordinary (pageable) memory.
const PAGEABLE: u64 = 0x10_0000;
/// Host memory in a shared `/dev/zero (deleted)` mapping (pinned before attach).
const PINNED_MAP: u64 = 0x1_0000_0000;
/// Not mapped in the process: device memory under unified addressing.
const DEVICE_PTR: u64 = 0x5000_0000_0000;
const MIB: u64 = 1 << 20;

/// A memory map with one pageable and one pinned-looking region; the rest is unmapped.
struct FakeMaps;

impl HostMemory for FakeMaps {
    fn classify(&mut self, pid: u32, addr: u64, _at_ns: u64) -> HostClass {
        assert_eq!(pid, PID);
        match addr {
            a if (PAGEABLE..PAGEABLE + 64 * MIB).contains(&a) => HostClass::Pageable,
            a if (PINNED_MAP..PINNED_MAP + MIB).contains(&a) => HostClass::PinnedMapping,
            _ => HostClass::Unmapped,
        }
    }
}

struct Trace {
    ev: Evidence,
    now: u64,
}

impl Trace {
    fn new() -> Self {
        Self { ev: Evidence::default(), now: 1_000_000 }
    }

    /// A call of `symbol` lasting `ns`, with the saved arguments, result and out value.
    fn call(&mut self, symbol: &str, args: [u64; CALL_ARGS], ret: u64, out: u64, ns: u64) -> &mut Self {
        let spec = PROBES.iter().find(|p| p.symbol == symbol).unwrap_or_else(|| panic!("{symbol} is not probed"));
        let start_ns = self.now;
        self.now += ns;
        let event = CallEvent {
            header: EventHeader { kind: KIND_CALL, probe: spec.id, tgid: PID, tid: TID, ts_ns: self.now },
            start_ns,
            args,
            ret,
            out,
        };
        self.ev.apply(&Event::Call(event), &mut FakeMaps);
        self
    }

    /// A 2D/3D copy whose probe read these memory types, pointers and size.
    fn struct_copy(&mut self, symbol: &str, src: (u64, u64), dst: (u64, u64), bytes: u64) -> &mut Self {
        self.call(symbol, [src.0, src.1, dst.0, dst.1, bytes], 0, 0, 1_000)
    }

    fn sync(&mut self, wait_ns: u64) -> &mut Self {
        self.call("cuStreamSynchronize", [0; CALL_ARGS], 0, 0, wait_ns)
    }
}

#[test]
fn a_2d_async_copy_from_pageable_memory_is_h2d_and_pageable() {
    let mut t = Trace::new();
    t.struct_copy("cuMemcpy2DAsync_v2", (HOST, PAGEABLE + 64), (DEVICE, DEVICE_PTR), 16 * 4096).sync(5_000);
    let h2d = &t.ev.copies.h2d;
    assert_eq!((h2d.count, h2d.bytes), (1, 16 * 4096));
    assert_eq!((h2d.pageable, h2d.pageable_bytes), (1, 16 * 4096));
    assert_eq!(h2d.sync_api, 0, "an async entry point");
    assert_eq!((h2d.then_synced, h2d.then_synced_wait_ns), (1, 5_000), "async copy, then a sync");
    assert_eq!(h2d.call_ns, 1_000);
    assert_eq!(t.ev.copies.d2h, DirStats::default());
    assert_eq!(t.ev.threads[&TID].copies, 1);
}

#[test]
fn a_synchronous_3d_copy_to_host_is_d2h_counts_as_sync_api_and_drains_the_queue() {
    let mut t = Trace::new();
    // Pinned while traced: cuMemHostAlloc returned PAGEABLE + 8 MiB through its out-pointer.
    let pinned = PAGEABLE + 8 * MIB;
    t.call("cuMemHostAlloc", [0, 4 * MIB, 0, 0, 0], 0, pinned, 1_000);
    t.struct_copy("cuMemcpy3D_v2", (DEVICE, DEVICE_PTR), (HOST, pinned + 4096), 4 * 4 * 1024).sync(3_000);
    let d2h = &t.ev.copies.d2h;
    assert_eq!((d2h.count, d2h.bytes, d2h.sync_api), (1, 16 * 1024, 1));
    assert_eq!((d2h.pinned_traced, d2h.pageable), (1, 0));
    // The copy drained the queue, so the sync after it did not wait for it.
    assert_eq!(d2h.then_synced, 0);
    assert_eq!(d2h.scalar_reads, 0);
}

#[test]
fn only_synchronous_copies_from_device_memory_to_the_host_drain_the_queue() {
    let id = |symbol: &str| PROBES.iter().find(|p| p.symbol == symbol).map(|p| p.id).expect("probed");
    let drains = |symbol: &str, src: u64, dst: u64| drains_queue_after(id(symbol), &[src, 1, dst, 2, 3]);
    for symbol in ["cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds", "cuMemcpy2DUnaligned_v2", "cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds"] {
        assert!(drains(symbol, DEVICE, HOST), "{symbol}");
        assert!(drains(symbol, ARRAY, HOST), "{symbol}");
        assert!(!drains(symbol, HOST, DEVICE), "{symbol}: H2D");
        assert!(!drains(symbol, DEVICE, DEVICE), "{symbol}: D2D");
        assert!(!drains(symbol, HOST, HOST), "{symbol}: H2H");
        // A unified end might be host memory: never assumed to drain (idle stays a lower bound).
        assert!(!drains(symbol, UNIFIED, HOST), "{symbol}: unified source");
        assert!(!drains(symbol, DEVICE, UNIFIED), "{symbol}: unified destination");
    }
    for symbol in ["cuMemcpy2DAsync_v2", "cuMemcpy2DAsync_v2_ptsz", "cuMemcpy3DAsync_v2", "cuMemcpy3DAsync_v2_ptsz"] {
        assert!(!drains(symbol, DEVICE, HOST), "{symbol} is async");
    }
    // The other probes keep their fixed answer whatever their arguments.
    assert!(drains("cuMemcpyDtoH_v2", 0, 0));
    assert!(!drains("cuMemcpyHtoD_v2", DEVICE, HOST));
}

#[test]
fn memory_types_give_the_direction_and_the_host_pointer() {
    let mut t = Trace::new();
    t.struct_copy("cuMemcpy2D_v2", (HOST, PINNED_MAP), (ARRAY, 0), 100);
    t.struct_copy("cuMemcpy2D_v2", (ARRAY, 0), (HOST, PAGEABLE), 200);
    t.struct_copy("cuMemcpy3DAsync_v2", (DEVICE, DEVICE_PTR), (ARRAY, 0), 300);
    t.struct_copy("cuMemcpy3DAsync_v2_ptsz", (ARRAY, 0), (DEVICE, DEVICE_PTR), 400);
    let c = &t.ev.copies;
    assert_eq!((c.h2d.count, c.h2d.bytes, c.h2d.pinned_by_map, c.h2d.sync_api), (1, 100, 1, 1));
    assert_eq!((c.d2h.count, c.d2h.bytes, c.d2h.pageable, c.d2h.pageable_bytes), (1, 200, 1, 200));
    assert_eq!((c.d2d.count, c.d2d.bytes, c.d2d.sync_api), (2, 700, 0));
    assert_eq!(c.d2d.pageable + c.d2d.pinned_by_map + c.d2d.pinned_traced + c.d2d.unknown_host, 0, "no host end");
}

#[test]
fn a_copy_between_two_host_buffers_is_h2h_and_not_classified() {
    let mut t = Trace::new();
    t.struct_copy("cuMemcpy2D_v2", (HOST, PAGEABLE), (HOST, PAGEABLE + MIB), 4096);
    // cuMemcpy between two host pointers is the same copy, decided from the pointers.
    t.call("cuMemcpy", [PAGEABLE + 2 * MIB, PAGEABLE, 512, 0, 0], 0, 0, 1_000);
    let c = &t.ev.copies;
    assert_eq!((c.h2h.count, c.h2h.bytes, c.h2h.sync_api), (2, 4096 + 512, 2));
    assert_eq!(c.h2h.pageable + c.h2h.pinned_by_map + c.h2h.pinned_traced + c.h2h.unknown_host, 0);
    assert_eq!(c.h2d.count + c.d2h.count + c.d2d.count, 0, "not counted as GPU traffic");
}

#[test]
fn unified_ends_are_decided_from_the_pointer_like_cu_memcpy() {
    let mut t = Trace::new();
    // A device block traced while allocated, at an address the process does map (as a
    // traced allocation wins over the memory map).
    t.call("cuMemAlloc_v2", [0, MIB, 0, 0, 0], 0, PAGEABLE + 32 * MIB, 1_000);
    t.struct_copy("cuMemcpy2DAsync_v2", (UNIFIED, PAGEABLE), (UNIFIED, PAGEABLE + 32 * MIB), 10);
    t.struct_copy("cuMemcpy2DAsync_v2", (UNIFIED, DEVICE_PTR), (UNIFIED, PINNED_MAP), 20);
    t.struct_copy("cuMemcpy2DAsync_v2", (UNIFIED, DEVICE_PTR), (DEVICE, DEVICE_PTR), 30);
    t.struct_copy("cuMemcpy2DAsync_v2", (UNIFIED, PAGEABLE), (HOST, PAGEABLE + MIB), 40);
    let c = &t.ev.copies;
    assert_eq!((c.h2d.count, c.h2d.bytes, c.h2d.pageable), (1, 10, 1));
    assert_eq!((c.d2h.count, c.d2h.bytes, c.d2h.pinned_by_map), (1, 20, 1));
    assert_eq!((c.d2d.count, c.d2d.bytes), (1, 30));
    assert_eq!((c.h2h.count, c.h2h.bytes), (1, 40));
}

#[test]
fn an_unreadable_struct_is_decided_from_its_pointers_and_counts_no_bytes() {
    // The probe saves zeros when bpf_probe_read_user fails: memory type 0 is no CUmemorytype.
    let mut t = Trace::new();
    t.struct_copy("cuMemcpy3D_v2", (0, 0), (0, 0), 0);
    let c = &t.ev.copies;
    assert_eq!((c.d2d.count, c.d2d.bytes), (1, 0));
    assert_eq!(t.ev.threads[&TID].copies, 1);
}

#[test]
fn maps_and_unmaps_are_counted_apart_from_allocations() {
    let mut t = Trace::new();
    // Expandable segments: physical memory from cuMemCreate (an allocation), then mapped.
    t.call("cuMemCreate", [0, 2 * MIB, 0, 0, 0], 0, 0x77, 1_000);
    t.call("cuMemMap", [DEVICE_PTR, 2 * MIB, 0, 0x77, 0], 0, 0, 4_000);
    t.call("cuMemMap", [DEVICE_PTR + 2 * MIB, 2 * MIB, 0, 0x78, 0], 2, 0, 500);
    t.call("cuMemUnmap", [DEVICE_PTR, 2 * MIB, 0, 0, 0], 0, 0, 3_000);
    t.call("cuMemRelease", [0x77, 0, 0, 0, 0], 0, 0, 1_000);
    let v = &t.ev.vmm;
    assert_eq!((v.maps, v.mapped_bytes, v.unmaps, v.unmapped_bytes, v.failures), (1, 2 * MIB, 1, 2 * MIB, 1));
    assert_eq!(v.call_ns, 7_500);
    let a = &t.ev.allocs;
    assert_eq!((a.count, a.bytes, a.frees, a.freed_bytes, a.failures), (1, 2 * MIB, 1, 2 * MIB, 0), "cuMemCreate/Release as before");
    // The host time counts as allocator time on the thread.
    let th = &t.ev.threads[&TID];
    assert_eq!((th.allocs, th.alloc_ns), (5, 9_500));
}

/// The first launch after a drain at `drained_at_ns`, seen at `ts_ns`.
fn idle_end(drained_at_ns: u64, ts_ns: u64) -> Event {
    let probe = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").expect("probed").id;
    Event::IdleEnd(gputrace_common::IdleEndEvent { header: EventHeader { kind: gputrace_common::KIND_IDLE_END, probe, tgid: PID, tid: TID, ts_ns }, drained_at_ns })
}

#[test]
fn with_launch_probes_off_part_of_the_time_spells_across_it_are_left_out_and_launches_scale() {
    const S: u64 = 1_000_000_000;
    let mut ev = Evidence::default();
    ev.apply(&idle_end(100, 200), &mut FakeMaps);
    // Off from 1 s to 3 s of a 4 s window.
    ev.launch_probes_off(S, &[]);
    ev.launch_probes_off(S + 5, &[]); // already off: no second span
    // A drain before the probes came back, ended by a launch after: its end is unknown.
    ev.launch_probes_on(3 * S, &[]);
    ev.apply(&idle_end(3 * S - 10, 3 * S + 50), &mut FakeMaps);
    ev.apply(&idle_end(3 * S + 100, 3 * S + 300), &mut FakeMaps);
    assert_eq!(ev.launches_off, vec![(S, 3 * S)]);
    assert_eq!(ev.spells_unseen, 1);
    let launch = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").expect("probed").id as usize;
    let mut counters = gputrace_common::ThreadCounters { tgid: PID, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
    counters.hits[launch] = 1_000;
    ev.add_counters(TID, &counters);
    let t = &ev.threads[&TID];
    assert_eq!((t.kernel_launches(), t.idle_periods, t.queue_idle_ns), (1_000, 2, 300));
    // On half of the window; since the first shedding (3 s), a third of the time: what came
    // after it counts triple (no calls to scale by), what came before (one spell) once.
    let on = ev.scale_sampled_launches(0, 4 * S).expect("sampled");
    assert!((on - 0.5).abs() < 1e-12);
    let t = &ev.threads[&TID];
    assert_eq!((t.kernel_launches(), t.idle_periods, t.queue_idle_ns), (3_000, 4, 100 + 3 * 200));
    assert_eq!(t.hits[launch], 1_000, "the traps taken stay as counted (the overhead estimate's)");
    // Probes on throughout: nothing to scale.
    assert_eq!(Evidence::default().scale_sampled_launches(0, 4 * S), None);
}

#[test]
fn launches_before_the_first_shedding_are_kept_as_counted_and_calls_made_then_do_not_scale() {
    // 30 syncs and 500 launches in the watch (all seen), then launches only: the thread has
    // no calls to scale by after it, so its later launches are scaled by time.
    let mut t = Trace::new();
    for _ in 0..30 {
        t.sync(1_000);
    }
    let launch = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").expect("probed").id as usize;
    let mut counters = gputrace_common::ThreadCounters { tgid: PID, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
    counters.hits[launch] = 500;
    let start = 0;
    t.ev.launch_probes_off(2_000_000, &[(TID, counters)]);
    t.ev.launch_probes_on(8_000_000, &[(TID, counters)]);
    // 10 ms window; since the first shedding 8 ms, of which 2 ms on: ×4 after it.
    counters.hits[launch] = 600;
    t.ev.add_counters(TID, &counters);
    t.ev.scale_sampled_launches(start, 10_000_000).expect("sampled");
    let th = &t.ev.threads[&TID];
    assert_eq!(th.calls_seen, 0, "calls before the first shedding are not counted");
    assert_eq!(th.kernel_launches(), 500 + 4 * 100);
}

#[test]
fn launch_probes_still_off_at_the_end_are_off_until_the_end() {
    let mut ev = Evidence::default();
    ev.launch_probes_off(3_000, &[]);
    assert!((ev.scale_sampled_launches(0, 4_000).expect("sampled") - 0.75).abs() < 1e-12);
    // A spell begun while they were off is left out even after the end.
    ev.apply(&idle_end(3_500, 5_000), &mut FakeMaps);
    assert_eq!(ev.spells_unseen, 1);
}

#[test]
fn a_thread_that_calls_the_driver_each_step_is_scaled_by_its_calls_not_by_time() {
    // Off from 1 ms to 6 ms of a 10 ms window (on half the time); 40 syncs seen with
    // launches on, 60 with them off: whatever the speed in each phase, launches per sync
    // hold, so ×100/40 (by time it would be ×2).
    let mut t = Trace::new();
    t.ev.launch_probes_off(1_000_000, &[]);
    t.ev.launch_probes_on(6_000_000, &[]);
    t.now = 0;
    for i in 0..100u64 {
        t.now = if i < 40 { 7_000_000 + i * 10_000 } else { 1_000_000 + (i - 40) * 10_000 };
        t.sync(1);
    }
    let launch = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").expect("probed").id as usize;
    let mut counters = gputrace_common::ThreadCounters { tgid: PID, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
    counters.hits[launch] = 400;
    t.ev.add_counters(TID, &counters);
    assert!((t.ev.scale_sampled_launches(0, 10_000_000).expect("sampled") - 0.5).abs() < 1e-12);
    let th = &t.ev.threads[&TID];
    assert_eq!((th.calls_seen, th.calls_while_launches_off), (100, 60));
    assert_eq!(th.kernel_launches(), 1_000);
}

#[test]
fn launches_counted_while_the_probes_were_being_taken_out_are_not_scaled_again() {
    // As above (×100/40 by calls), but 50 of the 400 launches were counted in the off phase,
    // while the kernel took the closed links' probes out: they belong to calls counted as
    // made with launches off, so the 350 of the on phase alone are scaled.
    let mut t = Trace::new();
    let launch = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").expect("probed").id as usize;
    let mut counters = gputrace_common::ThreadCounters { tgid: PID, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
    t.ev.launch_probes_off(1_000_000, &[(TID, counters)]);
    counters.hits[launch] = 50;
    t.ev.launch_probes_on(6_000_000, &[(TID, counters)]);
    for i in 0..100u64 {
        t.now = if i < 40 { 7_000_000 + i * 10_000 } else { 1_000_000 + (i - 40) * 10_000 };
        t.sync(1);
    }
    counters.hits[launch] = 400;
    t.ev.add_counters(TID, &counters);
    t.ev.scale_sampled_launches(0, 10_000_000).expect("sampled");
    assert_eq!(t.ev.threads[&TID].kernel_launches(), 875, "350 × 100/40, not 400 × 100/40");
}

#[test]
fn with_call_probes_off_part_of_the_time_calls_and_the_wakes_of_on_phases_scale_to_the_window() {
    use gputrace_common::{WakeKey, WakeStats};
    // A 10 ms window with everything off from 2 ms to 7 ms: on half of it. 40 syncs of 1 µs
    // seen in the on phases stand for 80.
    let mut t = Trace::new();
    t.ev.launch_probes_off(2_000_000, &[]);
    t.ev.call_probes_off(2_000_000);
    t.ev.call_probes_off(2_000_010); // already off: no second span
    t.ev.call_probes_on(7_000_000);
    t.ev.launch_probes_on(7_000_000, &[]);
    for i in 0..40u64 {
        t.now = if i < 20 { i * 50_000 } else { 7_000_000 + (i - 20) * 50_000 };
        t.sync(1_000);
    }
    assert_eq!(t.ev.calls_off, vec![(2_000_000, 7_000_000)]);
    // Wakeups: 3 ms asleep outside CUDA by one key, of it 1 ms in the off phase (read from the
    // wakeup map around it); and one key woken only in the off phase.
    let key = |stack_id: i64| WakeKey { tid: TID, waker_tgid: 99, stack_id, in_cuda: 0, _reserved: 0 };
    let stats = |count: u64, ns: u64| WakeStats { count, ns, ..WakeStats::default() };
    let mut off = sampled_calls::WakesOff::default();
    off.off(vec![(key(1), stats(2, 2_000_000))]);
    assert!(off.is_off());
    off.on(&[(key(1), stats(3, 3_000_000)), (key(2), stats(1, 500_000))]);
    assert!(!off.is_off());
    let wake = |stack_id: i64, count: u64, ns: u64| waits::Wake { tid: TID, pid: PID, waker_pid: 99, stack_id, count, ns, ..waits::Wake::default() };
    t.ev.wakes = vec![wake(1, 3, 3_000_000), wake(2, 1, 500_000)];
    let on = t.ev.scale_sampled_calls(0, 10_000_000, &off).expect("sampled");
    assert!((on - 0.5).abs() < 1e-12);
    let th = &t.ev.threads[&TID];
    assert_eq!((th.syncs, th.sync_wait_ns), (80, 80_000));
    assert_eq!((t.ev.syncs.count, t.ev.syncs.wait_ns), (80, 80_000));
    assert_eq!(t.ev.wakes.len(), 1, "a key woken only while the calls were off is left out");
    assert_eq!((t.ev.wakes[0].count, t.ev.wakes[0].ns), (4, 4_000_000));
    // The launch counts scale by time, the calls of the off phase being unseen.
    let launch = PROBES.iter().find(|p| p.symbol == "cuLaunchKernel").expect("probed").id as usize;
    let sync = PROBES.iter().find(|p| p.symbol == "cuStreamSynchronize").expect("probed").id as usize;
    let mut counters = gputrace_common::ThreadCounters { tgid: PID, drained_at_ns: 0, ..gputrace_common::ThreadCounters::ZERO };
    counters.hits[launch] = 400;
    counters.hits[sync] = 40;
    t.ev.add_counters(TID, &counters);
    t.ev.scale_sampled_launches(0, 10_000_000).expect("sampled");
    let th = &t.ev.threads[&TID];
    // Since the first shedding (2 ms), 8 ms of which 3 ms on; the hits before it are not
    // known apart here (no counters at the shedding), so all are scaled ×8/3.
    assert_eq!(th.kernel_launches(), 1_067);
    assert_eq!(th.hits_estimated(sync), 107, "the sync probe's hits scale with the launches'");
    assert_eq!(th.hits[sync], 40, "the traps taken stay as counted (the overhead estimate's)");
    // Calls on throughout: nothing to scale.
    assert_eq!(Evidence::default().scale_sampled_calls(0, 10_000_000, &sampled_calls::WakesOff::default()), None);
}

#[test]
fn a_ranks_placement_is_read_from_any_environment_without_panic() {
    let env = b"PATH=/bin\0LOCAL_RANK=1\0CUDA_VISIBLE_DEVICES=GPU-aa, GPU-bb\0";
    let r = super::RankEnv::parse(env);
    assert_eq!((r.local_rank, r.gpu().as_deref()), (Some(1), Some("GPU-bb")));
    // No list: device LOCAL_RANK; a list too short: unknown.
    assert_eq!(super::RankEnv::parse(b"LOCAL_RANK=3\0").gpu().as_deref(), Some("3"));
    assert_eq!(super::RankEnv::parse(b"LOCAL_RANK=3\0CUDA_VISIBLE_DEVICES=0,1\0").gpu(), None);
    // Not a number, not UTF-8, a name that only starts alike, nothing: no placement.
    assert_eq!(super::RankEnv::parse(b"LOCAL_RANK=x\0").local_rank, None);
    assert_eq!(super::RankEnv::parse(b"LOCAL_RANK=\xff\0").local_rank, None);
    assert_eq!(super::RankEnv::parse(b"LOCAL_RANKS=2\0").local_rank, None);
    assert_eq!(super::RankEnv::parse(b""), super::RankEnv::default());
    assert!(super::RankEnv::parse(b"CUDA_VISIBLE_DEVICES=\xff\0").visible_devices.is_some());
}
