//! What each traced call costs the job, as the report estimates it (its traps and our programs'
//! run time, beside what the job's own CPU samples saw in the traps), and a verdict that needs
//! the calls' ends: these read time, so they run alone (`xtask/src/suites.rs`). The exact
//! counts of the same calls are `calls.rs`.
use gputrace_tests::{require_root, run_fakejob, run_fakejob_opts};

#[test]
fn without_return_probes_a_thread_is_not_taken_to_stay_inside_its_first_call() {
    require_root();
    // A sleep between synchronizes, outside any CUDA call. With no return probe to say a
    // call ended, a thread once inside one read as inside CUDA for good: the timer's
    // wakeups were taken for waits inside the driver, and the job read as input-starved.
    let out = std::process::Command::new(gputrace_tests::gputrace())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        .args(["run", "--json", "--entry-only", "--"])
        .arg(gputrace_tests::fakejob())
        .args(["--steps", "40", "--driver-launches", "5", "--sync", "--sleep-ms", "5"])
        .output()
        .expect("gputrace runs");
    let r = gputrace_tests::report_json(&out.stdout);
    assert_eq!(r["tracer"]["entry_only"], true);
    assert_eq!(r["verdict"], "host-sleep", "{:#}", r["diagnoses"]);
}

/// The overhead estimate charges each call its traps and what our programs did in them, as the
/// kernel accounted it (issue 34): a copy and a sync a step, each with a return probe.
#[test]
fn each_calls_estimate_includes_our_programs_run_time() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--kernel-us", "0", "--steps", "2000", "--item", "1"]);
    assert_eq!(code, 0, "{stderr}");
    let o = &r["tracer"]["overhead"];
    assert_eq!(o["basis"], "measured", "{o:#}");
    for symbol in ["cuMemcpyDtoHAsync_v2", "cuStreamSynchronize"] {
        let probes = o["per_probe"].as_array().expect("per_probe");
        let p = probes.iter().find(|p| p["symbol"] == symbol).unwrap_or_else(|| panic!("{symbol}: {o:#}"));
        assert_eq!(p["hits"].as_u64(), Some(2000), "{p:#}");
        let program = p["program_ns"].as_f64().unwrap_or_else(|| panic!("no program run time: {p:#}"));
        let (entry, ret) = (p["entry_ns"].as_f64().expect("entry_ns"), p["return_ns"].as_f64().expect("return_ns"));
        // Both programs ran every call: some tens of ns at least, and a part of the call's cost.
        assert!(program > 20.0 && program < entry + ret, "{p:#}");
        assert!((p["cost_s"].as_f64().expect("cost_s") - 2000.0 * (entry + ret) / 1e9).abs() < 1e-9, "{p:#}");
    }
}

/// The job's own CPU samples, caught inside our traps, are shown beside the model once there
/// are enough of them (issue 34), with stacks or without (the sampler runs under
/// `--no-stacks` for this alone). Not applied: page faults and interrupts look alike to them.
#[test]
fn the_time_the_jobs_samples_saw_in_traps_is_shown_beside_the_model() {
    require_root();
    // 200,000 `.item()` steps: 800,000 traps, a second or more of them on any machine.
    let job = ["--kernel-us", "0", "--steps", "200000", "--item", "1"];
    for options in [&["--nvml-hz", "0"][..], &["--nvml-hz", "0", "--no-stacks"]] {
        let (r, code, stderr) = run_fakejob_opts(options, &job);
        assert_eq!(code, 0, "{stderr}");
        let o = &r["tracer"]["overhead"];
        let f = |k: &str| o[k].as_f64().unwrap_or_else(|| panic!("{k}: {o:#}"));
        let s = &o["sampled"];
        let (samples, in_trap) = (s["samples"].as_u64().expect("samples"), s["in_trap"].as_u64().expect("in_trap"));
        assert!(in_trap >= 30 && in_trap <= samples, "{options:?}: {o:#}");
        assert_eq!(o["basis"], "measured", "{options:?}: {o:#}");
        let scale = s["scale"].as_f64().expect("a scale");
        // The samples' time over the model's; the estimate is the model's.
        assert!((f("estimated_s") - f("modelled_s")).abs() < 1e-9, "{o:#}");
        assert!((s["in_trap_s"].as_f64().expect("in_trap_s") - f("modelled_s") * scale).abs() < 1e-9, "{o:#}");
        let probes: f64 = o["per_probe"].as_array().expect("per_probe").iter().map(|p| p["cost_s"].as_f64().expect("cost_s")).sum();
        assert!((probes - f("estimated_s")).abs() < 1e-6, "the probes' costs add up to the estimate: {o:#}");
        // A loop of nothing but traps: the samples and the costs measured apart agree to a few
        // fold at worst (2 % on the build machine, docs/benchmarks.md).
        assert!((0.25..4.0).contains(&scale), "{o:#}");
    }
}
