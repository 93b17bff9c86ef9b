//! `--max-overhead PCT` on the fake CUDA: a launch-heavy job gets its launch probes taken off
//! part of the time, its launch count estimated close to the truth and every other count
//! exact; a light job is left alone; `record` refuses the flag.

use gputrace_tests::{gputrace, hits, num, require_root, run_fakejob_opts};

/// 4,000 steps of 200 launches and a synchronize: ~4 s, ~200,000 launches a second.
const STEPS: u64 = 4_000;
const LAUNCHES_PER_STEP: u64 = 200;

fn heavy_job() -> Vec<String> {
    ["--steps", &STEPS.to_string(), "--driver-launches", &LAUNCHES_PER_STEP.to_string(), "--sync"].iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_launch_heavy_job_is_duty_cycled_to_its_budget_and_its_launches_estimated() {
    // A budget of 2 %: the job's 4,000 synchronizes alone cost 0.6 % of its window on the CI
    // machine of 2026-12-02 (5-6 µs a sync, our program's stack copy included), and its
    // launches at the shortest duty cycle 0.4 % more, so 1 % could not be kept there
    // (`achievable` false); on the machine before it could, with cheaper traps.
    const BUDGET: f64 = 2.0;
    require_root();
    let args = heavy_job();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (r, code, stderr) = run_fakejob_opts(&["--max-overhead", "2"], &args);
    assert_eq!(code, 0, "{stderr}");
    let s = &r["tracer"]["sampling"];
    assert_eq!(s["max_overhead_pct"], BUDGET, "{s:#}");
    assert!(s["probes"].as_array().expect("a list").iter().any(|p| p == "cuLaunchKernel"), "{s:#}");
    let on = s["on_fraction"].as_f64().expect("on_fraction");
    assert!(on > 0.0 && on < 0.6, "the launch probes were off most of the time: on {on}; {s:#}");
    assert!(num(&r, "/tracer/sampling/cycles") >= 2, "{s:#}");
    assert_eq!(s["achievable"], true, "{s:#}");
    // The window's estimated cost: at the budget, give or take a few tenths of a point. A
    // window of 4 s pays back its first 50 ms (every probe on) over the periods that follow,
    // and the kernel takes a shed probe out over a grace period or two, whose traps the
    // next on phase is shortened by (`budget_controller::Budget::lingering_ns`). `met` says
    // whether it kept the budget.
    let window = r["tracer"]["overhead"]["fraction_of_window"].as_f64().expect("fraction_of_window") * 100.0;
    assert!(window <= BUDGET + 0.5, "the window's estimated cost {window:.2}% for a budget of {BUDGET}%: {s:#}");
    assert_eq!(s["met"], window <= BUDGET * 1.001, "met says whether the window kept the budget: {window:.3}%; {s:#}");

    // Launches: an estimate close to the truth; what fired is fewer.
    let truth = STEPS * LAUNCHES_PER_STEP;
    let estimated = num(&r, "/cuda/launches/kernels");
    let off_by = (estimated as f64 - truth as f64).abs() / truth as f64;
    assert!(off_by < 0.10, "estimated {estimated} launches of {truth} ({:.1}% off)", off_by * 100.0);
    let counted = hits(&r, "cuLaunchKernel");
    assert!(counted < truth * 7 / 10, "counted {counted} of {truth}: the probes were not taken off");
    // Everything else exact.
    assert_eq!(num(&r, "/cuda/syncs/count"), STEPS);
    assert_eq!(hits(&r, "cuCtxSynchronize_v2"), STEPS);

    // Far below the cost of every launch trapped (~20 % of the thread here).
    let notes = r["tracer"]["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("--max-overhead 2") && n.contains("estimates"))), "{notes:#?}");
}

#[test]
fn a_light_job_keeps_every_probe_on_and_exact_counts() {
    require_root();
    let (r, code, stderr) = run_fakejob_opts(&["--max-overhead", "5"], &["--steps", "200", "--driver-launches", "5", "--kernel-us", "2000", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    let s = &r["tracer"]["sampling"];
    assert_eq!(s["on_fraction"], 1.0, "{s:#}");
    assert_eq!(s["cycles"], 0, "{s:#}");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 1_000);
    assert_eq!(hits(&r, "cuLaunchKernel"), 1_000);
}

#[test]
fn without_the_flag_there_is_no_sampling_and_record_refuses_it() {
    require_root();
    let (r, code, stderr) = run_fakejob_opts(&[], &["--steps", "20", "--driver-launches", "5", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(r["tracer"].get("sampling").is_none(), "{:#}", r["tracer"]);
    let out = std::process::Command::new(gputrace())
        .args(["record", "--max-overhead", "1", "-o", "/nonexistent/never-written.gtr", "--", "true"])
        .output()
        .expect("gputrace runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-overhead is for attach and run"), "{out:?}");
    for bad in ["0", "150", "x"] {
        let out = std::process::Command::new(gputrace()).args(["attach", "--pid", "1", "--max-overhead", bad]).output().expect("gputrace runs");
        assert_eq!(out.status.code(), Some(2), "--max-overhead {bad}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("overhead budget") || stderr.contains("not a percentage"), "--max-overhead {bad}: {stderr}");
    }
}

#[test]
fn short_windows_estimate_launches_without_bias_and_say_they_are_estimates() {
    // ~2–3 s windows, where the probes that linger after each shedding weighed most: their
    // launches were counted, then scaled again (1.05–1.40× the truth). A sync every 200
    // launches, whose probes cost under 1 % of the thread on the CI machine (6.5 µs a sync
    // with its stack, on 2026-12-03): a budget of 3 % takes the launch probes alone off.
    // (40,000 syncs cost more than any such budget, and went too: `a_scalar_read_loop_…`.)
    const TRUTH: f64 = 400_000.0;
    require_root();
    let job = ["--steps", "2000", "--driver-launches", "200", "--sync"];
    for round in 0..3 {
        let (r, code, stderr) = run_fakejob_opts(&["--max-overhead", "3", "--nvml-hz", "0"], &job);
        assert_eq!(code, 0, "{stderr}");
        let s = &r["tracer"]["sampling"];
        assert!(s["on_fraction"].as_f64().is_some_and(|on| on < 1.0), "round {round}: the probes were shed: {s:#}");
        assert_eq!(num(&r, "/cuda/syncs/count"), 2_000, "round {round}: the syncs stayed on: {s:#}");
        let ratio = num(&r, "/cuda/launches/kernels") as f64 / TRUTH;
        // Within 5 % of the truth, and 7 % above it: on the CI machine of 2026-12-02 (a launch
        // trap of 1.05 µs) six runs read 1.018–1.039× after the on phases began where the
        // links were back (`budget_loop`), 1.03–1.09× before. The 3 % left is not explained.
        assert!((0.95..=1.07).contains(&ratio), "round {round}: estimated {ratio:.3}× the launches made: {s:#}");
        assert_eq!(r["cuda"]["launches"]["estimated"], true, "round {round}");
        assert_eq!(r["tracer"]["complete"], false, "an estimate is not a complete count");
        // One figure for the window's cost.
        let window = r["tracer"]["overhead"]["fraction_of_window"].as_f64().expect("fraction") * 100.0;
        let said = s["estimated_overhead_pct"].as_f64().expect("estimated_overhead_pct");
        assert!((window - said).abs() < 1e-9, "round {round}: {window} vs {said}");
    }
    // The text report marks the estimate where it shows it.
    let out = std::process::Command::new(gputrace())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        .args(["run", "--nvml-hz", "0", "--max-overhead", "3", "--"])
        .arg(gputrace_tests::fakejob())
        .args(job)
        .output()
        .expect("gputrace runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("launches ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains('~'), "{line}");
    assert!(text.contains("(estimated: --max-overhead"), "{text}");
    assert!(text.contains("launch counts are ESTIMATES"), "{text}");
}

#[test]
fn a_scalar_read_loop_has_its_copy_and_sync_probes_taken_off_too_and_keeps_its_diagnosis() {
    // `.item()` every step: a device-to-host copy and a sync, four traps beside two launches.
    // The calls alone cost far more than 1 %, so they go with the launches; allocations stay.
    const STEPS: u64 = 100_000;
    require_root();
    let job = ["--steps", "100000", "--driver-launches", "2", "--item", "1", "--kernel-us", "5"];
    let (full, code, stderr) = run_fakejob_opts(&["--nvml-hz", "0"], &job);
    assert_eq!(code, 0, "{stderr}");
    let (r, code, stderr) = run_fakejob_opts(&["--max-overhead", "1", "--nvml-hz", "0"], &job);
    assert_eq!(code, 0, "{stderr}");
    let s = &r["tracer"]["sampling"];
    let probes: Vec<&str> = s["probes"].as_array().expect("a list").iter().filter_map(|p| p.as_str()).collect();
    for symbol in ["cuLaunchKernel", "cuMemcpyDtoHAsync_v2", "cuStreamSynchronize"] {
        assert!(probes.contains(&symbol), "{symbol} was taken off: {s:#}");
    }
    assert!(!probes.contains(&"cuMemAlloc_v2"), "allocations are never taken off: {s:#}");
    assert!(s["on_fraction"].as_f64().is_some_and(|on| on < 0.5), "{s:#}");
    // The traps taken: far fewer than the calls made.
    let counted = hits(&r, "cuStreamSynchronize");
    assert!(counted < STEPS / 2, "{counted} syncs trapped of {STEPS}: the call probes were not taken off");
    // Allocations exact: the job's one buffer.
    assert_eq!(hits(&r, "cuMemAlloc_v2"), hits(&full, "cuMemAlloc_v2"));
    // Counts scaled by time: low, as the traps slowed the on phases (tracer.notes); on the
    // fake CUDA of this machine they are most of the loop's time (0.45× the syncs on
    // 2026-12-03); never above the truth by more than noise.
    let syncs = num(&r, "/cuda/syncs/count") as f64 / STEPS as f64;
    assert!((0.2..=1.15).contains(&syncs), "estimated {syncs:.2}× the syncs made: {s:#}");
    assert_eq!(r["tracer"]["complete"], false, "an estimate is not a complete count");
    let notes = r["tracer"]["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("copy, memset and sync probes were on") && n.contains("read low"))),
        "{notes:#?}"
    );
    // The diagnosis does not change: the planted causes (a pageable scalar copy and a sync
    // every step) are found both ways, and nothing the full trace did not find. The full
    // trace may find more, and order them otherwise: its own traps slow this loop 1.7× on
    // this machine and swell its host and copy time, which the sampled window mostly lacks.
    // `cpu-starved` is left out both ways: on a 2-core machine the job, gputrace and the
    // test harness compete for the CPUs, and a fresh CI run found it in either run.
    let ids = |r: &serde_json::Value| -> std::collections::BTreeSet<String> {
        r["diagnoses"]
            .as_array()
            .expect("diagnoses")
            .iter()
            .filter(|d| d["severity"] != "info" && d["id"] != "cpu-starved")
            .map(|d| d["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let (sampled, traced) = (ids(&r), ids(&full));
    for planted in ["pageable-copy", "host-sync"] {
        assert!(sampled.contains(planted) && traced.contains(planted), "{planted}: sampled {sampled:?}, traced {traced:?}");
    }
    assert!(sampled.is_subset(&traced), "sampled {sampled:?}, traced {traced:?}");
    assert!(r["verdict"].as_str().is_some_and(|v| sampled.contains(v) || v == "cpu-starved"), "verdict {} of {sampled:?}", r["verdict"]);
}
