//! Copies, syncs, allocations: exact counts and bytes, pinned vs pageable classification.
use gputrace_tests::{num, require_root, run_fakejob, Gated, Tracer};

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
    let mut job = Gated::start(&["--steps", "25", "--pinned-h2d", "1048576", "--pageable-h2d", "65536"]);
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
