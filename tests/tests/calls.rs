//! Copies, syncs, allocations: exact counts and bytes, pinned vs pageable classification. Beside
//! other suites (`xtask/src/suites.rs`): no judgement of time enters; what the calls cost is
//! `call_costs.rs`.
use gputrace_tests::{hits, num, require_root, run_fakejob, Gated, Tracer};

const MIB: u64 = 1 << 20;

#[test]
fn copies_syncs_and_allocations_are_exact() {
    require_root();
    // Per step: pageable H2D (1 MiB) + sync, pinned H2D (2 MiB), 3 × (.item(): 4-byte D2H +
    // sync), device sync, 2 × (alloc 1 MiB + free). Plus one 64 MiB alloc/free per run.
    let steps = 40;
    let (r, code, stderr) = run_fakejob(&[
        "--steps",
        "40",
        "--pageable-h2d",
        "1048576",
        "--pinned-h2d",
        "2097152",
        "--item",
        "3",
        "--sync",
        "--alloc-churn",
        "2",
        // Alive a moment after its work, its buffers still mapped: its copies are classified
        // by its live memory map, and a job of a few milliseconds can exit (or free them)
        // before the reader, short of CPU on two cores beside a spinning fake GPU, reads it
        // (a real job lives much longer).
        "--hold-ms",
        "1000",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let h2d = &r["cuda"]["copies"]["h2d"];
    assert_eq!(h2d["count"], 2 * steps);
    assert_eq!(h2d["bytes"], steps * 3 * MIB);
    assert_eq!(h2d["pageable"], steps);
    assert_eq!(h2d["classified"]["pinned_traced"], steps, "pinned while traced: seen by the probes");
    assert_eq!(h2d["then_synced"], steps, "non_blocking=False pattern");
    let d2h = &r["cuda"]["copies"]["d2h"];
    assert_eq!(d2h["count"], 3 * steps);
    assert_eq!(d2h["bytes"], 3 * steps * 4);
    assert_eq!(d2h["pageable"], 3 * steps);
    assert_eq!(d2h["scalar_reads"], 3 * steps, ".item() pattern");
    assert_eq!(d2h["then_synced"], 0, "scalar reads are not bulk copies");
    assert_eq!(num(&r, "/cuda/syncs/count"), steps * (1 + 3 + 1));
    assert!(r["cuda"]["syncs"]["wait_s"].as_f64().expect("wait") > 0.0);
    assert_eq!(num(&r, "/cuda/allocs/count"), 2 * steps + 1);
    assert_eq!(num(&r, "/cuda/allocs/frees"), 2 * steps + 1);
    assert_eq!(num(&r, "/cuda/allocs/bytes"), 2 * steps * MIB + 64 * MIB);
    assert_eq!(num(&r, "/cuda/allocs/live_bytes"), 0);
    assert_eq!(num(&r, "/cuda/host_pinned/count"), 1);
    assert_eq!(num(&r, "/cuda/host_pinned/bytes"), 2 * MIB);
    let contexts = r["cuda"]["contexts"].as_array().expect("contexts");
    assert!(contexts.iter().any(|c| c["symbol"] == "cuDevicePrimaryCtxRetain" && c["uid"] == 0), "{contexts:?}");
    assert_eq!(r["tracer"]["complete"], true);
}

#[test]
fn memory_pinned_before_attach_is_recognised_from_the_memory_map() {
    require_root();
    // The hold: see `copies_syncs_and_allocations_are_exact`.
    let mut job = Gated::start(&["--steps", "25", "--pinned-h2d", "1048576", "--pageable-h2d", "65536", "--hold-ms", "1000"]);
    let tracer = Tracer::attach(job.pid, &[]);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    let h2d = &r["cuda"]["copies"]["h2d"];
    assert_eq!(h2d["count"], 50);
    assert_eq!(h2d["classified"]["pinned_by_map"], 25, "{h2d}");
    assert_eq!(h2d["classified"]["pinned_traced"], 0);
    assert_eq!(h2d["pageable"], 25);
    assert_eq!(h2d["pageable_bytes"], 25 * 65536);
}

#[test]
fn copies_described_by_2d_and_3d_structs_are_exact() {
    require_root();
    // Per step: one cudaMemcpy2DAsync H2D of 1 MiB (16 rows) from pageable memory, 2 launches,
    // one synchronous cudaMemcpy3D D2H of 64 KiB (4 × 4 rows) into pageable memory. The
    // runtime forwards them to cuMemcpy2DAsync_v2 and cuMemcpy3D_v2 with a struct argument.
    let steps = 30;
    // The hold: see `copies_syncs_and_allocations_are_exact`.
    let (r, code, stderr) = run_fakejob(&["--steps", "30", "--copy2d", "1048576", "--driver-launches", "2", "--copy3d", "65536", "--hold-ms", "1000"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(hits(&r, "cuMemcpy2DAsync_v2"), steps);
    assert_eq!(hits(&r, "cuMemcpy3D_v2"), steps);
    let h2d = &r["cuda"]["copies"]["h2d"];
    assert_eq!(h2d["count"], steps, "{h2d}");
    assert_eq!(h2d["bytes"], steps * MIB, "Width × Height, read from the struct");
    assert_eq!(h2d["pageable"], steps);
    assert_eq!(h2d["pageable_bytes"], steps * MIB);
    assert_eq!(h2d["classified"]["pageable"], steps, "host pointer srcHost, read from the struct");
    assert_eq!(h2d["sync_api"], 0, "cuMemcpy2DAsync_v2 is async");
    let d2h = &r["cuda"]["copies"]["d2h"];
    assert_eq!(d2h["count"], steps, "{d2h}");
    assert_eq!(d2h["bytes"], steps * 65536, "Width × Height × Depth");
    assert_eq!(d2h["pageable"], steps, "host pointer dstHost");
    assert_eq!(d2h["sync_api"], steps, "cuMemcpy3D_v2 is synchronous");
    assert_eq!(d2h["then_synced"], 0);
    for dir in ["d2d", "peer", "h2h"] {
        assert_eq!(r["cuda"]["copies"][dir]["count"], 0, "{dir}");
    }
    // The synchronous D2H copy is the only call that drains the queue: each step's launches
    // after it end an idle period, so idle time shows only if the probe saw it drain.
    assert!(r["cuda"]["queue_idle_s"].as_f64().expect("queue_idle_s") > 0.0, "{:#}", r["cuda"]);
    assert_eq!(r["tracer"]["complete"], true);
}

#[test]
fn an_async_2d_copy_leaves_the_queue_busy() {
    require_root();
    // The control for the test above: the same launches with only the async 2D copy drain
    // nothing, so no queue-idle time may appear.
    let (r, code, stderr) = run_fakejob(&["--steps", "20", "--copy2d", "65536", "--driver-launches", "2"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&r, "/cuda/copies/h2d/count"), 20);
    assert_eq!(num(&r, "/cuda/copies/h2d/bytes"), 20 * 65536);
    assert_eq!(r["cuda"]["queue_idle_s"].as_f64(), Some(0.0), "{:#}", r["cuda"]);
}

#[test]
fn virtual_memory_mappings_are_counted_apart_from_allocations() {
    require_root();
    // Per step: 3 × (cuMemCreate 2 MiB + cuMemMap), then 3 × (cuMemUnmap + cuMemRelease).
    // Plus one 64 MiB cudaMalloc/cudaFree per run.
    let steps = 25;
    let (r, code, stderr) = run_fakejob(&["--steps", "25", "--vmm", "3"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(hits(&r, "cuMemMap"), 3 * steps);
    assert_eq!(hits(&r, "cuMemUnmap"), 3 * steps);
    let vmm = &r["cuda"]["vmm"];
    assert_eq!(vmm["maps"], 3 * steps, "{vmm}");
    assert_eq!(vmm["unmaps"], 3 * steps);
    assert_eq!(vmm["mapped_bytes"], 3 * steps * 2 * MIB);
    assert_eq!(vmm["unmapped_bytes"], 3 * steps * 2 * MIB);
    assert_eq!(vmm["failures"], 0);
    assert!(vmm["call_s"].as_f64().expect("call_s") > 0.0);
    // cuMemCreate/cuMemRelease stay allocations; the mappings are not counted again there.
    assert_eq!(num(&r, "/cuda/allocs/count"), 3 * steps + 1);
    assert_eq!(num(&r, "/cuda/allocs/frees"), 3 * steps + 1);
    assert_eq!(num(&r, "/cuda/allocs/bytes"), 3 * steps * 2 * MIB + 64 * MIB);
    assert_eq!(num(&r, "/cuda/allocs/live_bytes"), 0);
    assert_eq!(r["tracer"]["complete"], true);
}

#[test]
fn failed_allocations_are_counted_as_out_of_memory() {
    require_root();
    // The fake GPU has 64 MiB, all taken by fakejob's first allocation: every 1 MiB
    // allocation of the churn then fails with CUDA_ERROR_OUT_OF_MEMORY.
    let (r, code, stderr) = run_fakejob(&["--device-memory-mib", "64", "--steps", "10", "--alloc-churn", "3", "--driver-launches", "1"]);
    assert_eq!(code, 0, "{stderr}");
    let a = &r["cuda"]["allocs"];
    assert_eq!(a["count"], 1, "{a}");
    assert_eq!(a["failures"], 30, "{a}");
    assert_eq!(a["out_of_memory"], 30, "{a}");
    assert_eq!(a["bytes"], 64 * MIB, "failed allocations add no bytes: {a}");
}

#[test]
fn return_probes_are_on_where_the_kernel_is_safe_and_off_when_asked() {
    require_root();
    let args = ["--steps", "100", "--driver-launches", "5", "--item", "2"];
    // This kernel lets a probed return bypass seccomp (checked at start): return probes on.
    let (r, code, stderr) = gputrace_tests::run_fakejob(&args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["tracer"]["entry_only"], false, "{r:#}");
    assert_eq!(num(&r, "/cuda/syncs/count"), 200);
    // Forced off: the calls are still counted (probe hits), without their details.
    let out = std::process::Command::new(gputrace_tests::gputrace())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        .args(["run", "--json", "--entry-only", "--"])
        .arg(gputrace_tests::fakejob())
        .args(args)
        .output()
        .expect("gputrace runs");
    let r = gputrace_tests::report_json(&out.stdout);
    assert_eq!(r["tracer"]["entry_only"], true);
    assert_eq!(num(&r, "/cuda/launches/kernels"), 500, "launches are entry probes: exact either way");
    assert_eq!(gputrace_tests::hits(&r, "cuStreamSynchronize"), 200, "calls counted at their entry");
    assert_eq!(num(&r, "/cuda/syncs/count"), 0, "no return probe, no sync record");
    assert!(r["tracer"]["notes"].as_array().expect("notes").iter().any(|n| n.as_str().is_some_and(|s| s.contains("entry-only"))));
}
