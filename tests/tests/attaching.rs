//! How probes go on and come off: a symbol the kernel refuses is left out without undoing or
//! doubling the rest, both ways of attaching uprobes count the same, and the report says
//! which way was used.
use gputrace_tests::{fake_cuda_dir, hits, require_root, run_fakejob_with, Gated, Tracer};

#[test]
fn a_symbol_the_kernel_cannot_probe_is_left_out_and_the_rest_count_once() {
    require_root();
    // In this library cuMemUnmap starts with an int3: its probe is refused. Before the fix
    // the links made before it stayed while the library was not marked attached, and each
    // rescan attached them again: every launch then counted two, three, … times.
    let lib_dir = fake_cuda_dir().join("unprobeable");
    let lib_dir = lib_dir.to_str().expect("utf-8 path");
    let mut job = Gated::start(&["--lib-dir", lib_dir, "--steps", "30", "--driver-launches", "10", "--sync", "--settle-ms", "700"]);
    let tracer = Tracer::attach(job.pid, &[]);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(hits(&r, "cuLaunchKernel"), 300, "each launch counted once, across several rescans");
    assert_eq!(hits(&r, "cuCtxSynchronize_v2"), 30);
    let notes: Vec<&str> = r["tracer"]["notes"].as_array().expect("notes").iter().filter_map(|n| n.as_str()).collect();
    assert!(notes.iter().any(|n| n.starts_with("cuMemUnmap not probed in") && n.contains("libcuda.so.1")), "{notes:?}");
    let probed: Vec<&str> = r["tracer"]["probes"].as_array().expect("probes").iter().filter_map(|p| p["symbol"].as_str()).collect();
    assert!(probed.contains(&"cuLaunchKernel") && probed.contains(&"cuMemMap") && !probed.contains(&"cuMemUnmap"), "{probed:?}");
}

#[test]
fn multi_links_and_perf_event_uprobes_count_the_same() {
    require_root();
    let args = ["--steps", "40", "--driver-launches", "5", "--item", "2", "--alloc-churn", "1", "--sync"];
    let mut counts = Vec::new();
    for kind in ["multi", "perf-event"] {
        // The variable only rules the links out; "multi" is the default where the kernel has them.
        let wrapper: &[&str] = if kind == "perf-event" { &["env", "GPUTRACE_UPROBE_LINKS=perf-event"] } else { &[] };
        let (r, code, stderr) = run_fakejob_with(wrapper, &args);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(r["tracer"]["uprobe_links"], kind, "{}", r["tracer"]["notes"]);
        assert_eq!(hits(&r, "cuLaunchKernel"), 200);
        assert_eq!(hits(&r, "cuCtxSynchronize_v2"), 40);
        assert_eq!(r["cuda"]["copies"]["d2h"]["count"], 80, "the .item() reads");
        assert_eq!(r["cuda"]["allocs"]["count"], 41);
        counts.push(r["tracer"]["probes"].clone());
    }
    assert_eq!(counts[0], counts[1], "every probe's hits, both ways");
}
