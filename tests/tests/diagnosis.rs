//! Planted bottlenecks get the right verdict; healthy jobs get no high or medium problem.
use gputrace_tests::{
    num, require_root, run_fakejob_nvml,
    twins::{self, owned, usual_fix},
};

/// The report of `fakejob ARGS`, checked for what holds of every report: the problems'
/// impacts are parts of one time account (they add up to at most 1), each saving is at most
/// its impact, and the account's buckets partition the window. The fake NVML reads the fake
/// GPU's busy time, as a real job's report has NVML's: the promises are judged against twins.
fn verdict(args: &[&str]) -> serde_json::Value {
    require_root();
    let (r, code, stderr) = run_fakejob_nvml(&[], args);
    assert_eq!(code, 0, "{stderr}");
    let diagnoses = r["diagnoses"].as_array().expect("diagnoses");
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    // Each fix's speed-up lies in its range, and its impact is the share it gives back.
    for d in diagnoses.iter().filter(|d| !d["saving"].is_null() && !d["saving"]["speedup"].is_null()) {
        let (x, lo, hi) = (f(&d["saving"]["speedup"]), f(&d["saving"]["range"][0]), f(&d["saving"]["range"][1]));
        assert!(lo <= x + 1e-9 && x <= hi + 1e-9 && lo >= 1.0 - 1e-9, "{d:#}");
        assert!((f(&d["impact"]) - (1.0 - 1.0 / x)).abs() < 1e-9, "{d:#}");
    }
    let buckets = r["time_account"]["buckets"].as_array().expect("a time account");
    let total: f64 = buckets.iter().map(|b| f(&b["fraction"])).sum();
    assert!((total - 1.0).abs() < 1e-6, "buckets add up to {total}");
    r
}

fn problems(r: &serde_json::Value) -> Vec<String> {
    r["diagnoses"]
        .as_array()
        .expect("diagnoses")
        .iter()
        .filter(|d| d["severity"] == "high" || d["severity"] == "medium")
        .filter(|d| d["id"] != "gpu-bound")
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect()
}

/// The report of the planted job `args`, checked against its twins, one per planted cause
/// (`twins::usual_fix`): the verdict is the fix whose twin ran fastest, its promise within
/// ±25 % of it.
fn judged(args: &[&str], causes: &[&'static str]) -> (serde_json::Value, twins::Measured) {
    let r = verdict(args);
    let planted = owned(args);
    let fixes: Vec<twins::Fix> = causes.iter().map(|id| usual_fix(&planted, id)).collect();
    let m = twins::assert_against(&r, &planted, &fixes);
    (r, m)
}

#[test]
fn tiny_kernels_launched_one_by_one_are_launch_bound() {
    // 1 000 steps (~0.5 s): at 200 the job ran 0.1 s, and one 83 ms wait for a CPU on the
    // 2-core CI machine made it cpu-starved (a fresh-clone run, 2026-12-02). Two causes
    // planted: the launches, and a sync every step; the twins say which fix buys more.
    let (r, _) = judged(&["--steps", "1000", "--driver-launches", "200", "--kernel-us", "1", "--sync"], &["launch-bound", "host-sync"]);
    assert_eq!(r["verdict"], "launch-bound", "{r:#}");
}

#[test]
fn pageable_copies_are_found() {
    let (r, _) = judged(
        &["--steps", "100", "--driver-launches", "5", "--kernel-us", "20", "--pageable-h2d", "8388608", "--host-us", "100"],
        &["pageable-copy", "host-bound"],
    );
    assert_eq!(r["verdict"], "pageable-copy", "{r:#}");
}

/// A batch made through the framework on the training thread, by a function of the job's own
/// (the brief of 2026-12-07: such loops were offered CUDA graphs where workers bought x5): 6 ms a
/// step inside the fake `libtorch_cpu.so`, then 50 small launches and a sync. Every native
/// sample of it is in the framework's library, as a dispatch's are; only the time since the
/// last launch says it is no dispatch. The graphs' twin gains nothing; moving the batch to a
/// worker, or dropping the sync so that it overlaps the GPU, gains the step's GPU time.
#[test]
fn a_batch_made_through_the_framework_on_the_training_thread_is_not_dispatch() {
    let (r, m) = judged(
        &["--steps", "150", "--driver-launches", "50", "--kernel-us", "20", "--torch-prep-us", "6000", "--sync"],
        &["host-bound", "host-sync", "launch-bound"],
    );
    assert_ne!(r["verdict"], "launch-bound", "{r:#}");
    let graphs = twins::promise(&r, "launch-bound").unwrap_or(1.0);
    let measured = m.of("launch-bound").expect("the graphs' twin");
    assert!(graphs <= measured * (1.0 + twins::PROMISE_TOLERANCE), "graphs promised x{graphs:.2}, measured x{measured:.2}: {r:#}");
    // The sync's bookkeeping form keeps the batch: it is the next step's input, not the work
    // that consumes the synced value.
    let sync = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "host-sync").unwrap_or_else(|| panic!("host-sync: {r:#}"));
    let dropped = sync["saving"]["variants"].as_array().expect("forms").iter().find(|v| v["name"] == "sync-and-bookkeeping").expect("the ranked form");
    let measured = m.of("host-sync").expect("the sync's twin");
    assert!(dropped["speedup"].as_f64().is_some_and(|x| x <= measured * (1.0 + twins::PROMISE_TOLERANCE)), "{dropped:#} against x{measured:.2}");
}

#[test]
fn pinned_async_copies_are_no_copy_problem() {
    let r = verdict(&["--steps", "100", "--driver-launches", "10", "--kernel-us", "500", "--pinned-h2d", "8388608", "--sync"]);
    assert_eq!(r["verdict"], "gpu-bound", "{r:#}");
    assert!(problems(&r).is_empty(), "{r:#}");
}

/// 64 MiB copied to pinned memory after 0.5 ms of kernels, then waited for: about 2.7 ms of
/// each 3.2 ms step is the transfer (the fake bus moves 25 GB/s). Asserted at ecd266d: the
/// verdict `blocking-copy`, and a fix that buys more than 5 %. On a GPU whose queue runs the
/// copy after the kernels on the same stream (as `non_blocking=True` on the current stream
/// does), making the copy asynchronous leaves the GPU the kernels plus the transfer, all of
/// today's step: the copy is found, but its fix promises no more than the bus allows.
#[test]
fn waiting_for_large_copies_every_step_is_blocking_copy_bounded_by_the_bus() {
    let r = verdict(&["--steps", "200", "--driver-launches", "5", "--kernel-us", "100", "--blocking-d2h", "67108864"]);
    let d = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "blocking-copy").unwrap_or_else(|| panic!("blocking-copy found: {r:#}"));
    assert_eq!(d["saving"]["bound"], "bus", "{d:#}");
    let x = d["saving"]["speedup"].as_f64().expect("a speed-up");
    // The step as traced (3.2 ms and up) over the bus time alone, 64 MiB at 25 GB/s: 2.68 ms
    // (the kernels' 0.5 ms come on top, read by NVML within its slack).
    let step_s = 1.0 / r["steps"]["per_second"].as_f64().expect("steps found");
    assert!(x <= step_s / (67_108_864.0 / 25e9) * 1.001, "no more than the bus allows: {d:#}");
    assert!(x < 1.10, "the transfer is most of the step: {d:#}");
}

/// The GPU-bound counterpart: each step runs 10 ms of kernels and ends with a 1 MiB `.cpu()`
/// into pinned memory. The wait is the GPU's work, not the copy's: gpu-bound, no alarm.
#[test]
fn a_gpu_bound_loop_ending_in_a_copy_is_not_blocking_copy() {
    let r = verdict(&["--steps", "100", "--driver-launches", "10", "--kernel-us", "1000", "--blocking-d2h", "1048576"]);
    assert_eq!(r["verdict"], "gpu-bound", "{r:#}");
    assert!(problems(&r).is_empty(), "{r:#}");
    // One sync after a copy every step: steps are found, about 99.5/s with 10 launches each.
    let steps = &r["steps"];
    let per_s = steps["per_second"].as_f64().unwrap_or_else(|| panic!("no steps: {r:#}"));
    assert!((80.0..=100.0).contains(&per_s), "{steps:#}");
    let launches = steps["per_step"]["launches"].as_f64().expect("launches per step");
    assert!((launches - 10.0).abs() < 1.5, "{steps:#}");
    assert!(steps["per_step"]["d2h_bytes"].as_f64().is_some_and(|b| (b - 1_048_576.0).abs() < 150_000.0), "{steps:#}");
}

/// Without a rhythm there are no steps: an irregular job gets `steps: null`.
#[test]
fn a_job_without_syncs_or_copies_has_no_steps() {
    let r = verdict(&["--steps", "200", "--driver-launches", "200", "--kernel-us", "1"]);
    assert!(r["steps"].is_null(), "{:#}", r["steps"]);
}

/// The text report for a pipe: no colour codes, 80 columns, verdict first.
#[test]
fn the_text_report_fits_80_columns_and_has_no_colour_off_a_terminal() {
    require_root();
    let out = std::process::Command::new(gputrace_tests::gputrace())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        .args(["run", "--"])
        .arg(gputrace_tests::fakejob())
        .args(["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"])
        .output()
        .expect("gputrace runs");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(!text.contains('\x1b'), "no escape codes into a pipe:\n{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{} columns: {line:?}\n{text}", line.chars().count());
    }
    let verdict_at = text.find("VERDICT:").expect("a verdict");
    // Steps come after the verdict. Whether this short loop keeps its beat is the rhythm's
    // business (a fresh CI run once saw too many of its 200 steps off the beat on the loaded
    // 2-core machine); the section's place is this test's.
    assert!(text.find("STEPS").is_none_or(|s| s > verdict_at), "{text}");
    // A job with a high problem, so that its saving and its sites are shown (and wrapped).
    assert!(text.contains("[HIGH]") && text.contains("saves:"), "{text}");
    assert!(text.contains("  at ") && text.contains("read_scalar"), "the site under the evidence: {text}");
}

#[test]
fn a_scalar_read_every_step_is_host_sync() {
    // Two fixes planted, and on the fake GPU they tie: without the read the 2 ms of host work
    // hides behind the 3 ms of kernels; moved to a worker it runs beside them. The twins
    // decide; both are reported.
    let (r, _) = judged(&["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"], &["host-sync", "host-bound"]);
    // 2 ms of host work after each read, 3 ms of kernels before it: the queue sits empty
    // while the host works, and the host's share of that is charged to host-sync (the reads'
    // wait for the kernels, inside the pageable copy call, is GPU time, not an empty queue).
    // Without the sync the host work would hide behind the next step's kernels, which are
    // longer. On a loaded 2-core machine the job also waits for a CPU, which takes its share.
    let idle = r["gpu_idle"]["lower_bound_fraction"].as_f64().expect("gpu idle");
    assert!(idle > 0.25, "{:#}", r["gpu_idle"]);
    assert!(r["diagnoses"][0]["impact"].as_f64().is_some_and(|i| i > 0.5 * idle), "{r:#}");
}

#[test]
fn a_synchronous_scalar_read_every_step_is_host_sync_not_a_pageable_copy() {
    // A native job's per-step read of its loss: one synchronous 4-byte cudaMemcpy into stack
    // memory (the nvcc job on the H200 read `pageable-copy`, whose fix, pinning, is no fix
    // for 4 bytes). It drains the queue as `.item()` does.
    let (r, _) = judged(&["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item-sync", "1", "--host-us", "2000"], &["host-sync", "host-bound"]);
    assert!(!problems(&r).contains(&"pageable-copy".to_owned()), "{r:#}");
    assert_eq!(num(&r, "/cuda/copies/d2h/scalar_reads"), 200, "{:#}", r["cuda"]["copies"]);
    let sync = r["diagnoses"].as_array().and_then(|ds| ds.iter().find(|d| d["id"] == "host-sync")).expect("host-sync");
    assert_eq!(sync["sites"][0]["function"], "read_scalar_sync", "{sync:#}");
}

/// 5 ms of host work after each read but only 1 ms of kernels. Dropping only the sync could
/// hide at most the 1 ms behind GPU work; moved to a worker the host work still takes its 5
/// ms: those two tie (6 / 5 = 1.2x). Dropping the sync with the bookkeeping that waits on it,
/// as "log every N steps" does, leaves the GPU's 1 ms: that form of host-sync's fix is the
/// one ranked (issue 57), and its twin (`--item` and `--host-us` dropped) says by how much.
#[test]
fn a_scalar_read_followed_by_more_host_work_than_gpu_work_ranks_dropping_the_bookkeeping_first() {
    let (r, m) = judged(&["--steps", "150", "--driver-launches", "10", "--kernel-us", "100", "--item", "1", "--host-us", "5000"], &["host-sync", "host-bound"]);
    assert_eq!(r["verdict"], "host-sync", "{r:#}");
    assert!(m.best().1 > 3.0, "the bookkeeping was most of the step: {m:?}");
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let diagnoses = r["diagnoses"].as_array().expect("list");
    let find = |id: &str| diagnoses.iter().find(|d| d["id"] == id).unwrap_or_else(|| panic!("{id} found: {r:#}"));
    let (sync, host) = (find("host-sync"), find("host-bound"));
    // Both forms are reported, the ranked one last and in `speedup`.
    let variants = sync["saving"]["variants"].as_array().unwrap_or_else(|| panic!("variants: {sync:#}"));
    let names: Vec<&str> = variants.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(names, ["sync", "sync-and-bookkeeping"], "{sync:#}");
    assert!((f(&variants[1]["speedup"]) - f(&sync["saving"]["speedup"])).abs() < 1e-9, "{sync:#}");
    // The sync alone hides at most the GPU's busy time behind the host's work.
    let gpu_busy_hi = f(&r["step_model"]["gpu_busy"][2]);
    assert!(f(&variants[0]["speedup"]) <= 1.0 / (1.0 - gpu_busy_hi) + 1e-9, "the sync alone is charged no more than the GPU's busy time ({gpu_busy_hi}): {r:#}");
    // Moved to a worker, the host work still takes its own time.
    let host_work: f64 = r["step_model"]["segments"].as_array().expect("segments").iter().filter(|s| s["name"] == "user").map(|s| f(&s["fraction"])).sum();
    assert!(f(&host["saving"]["speedup"]) <= 1.0 / host_work + 1e-9, "host-bound promises no more than the step over its host work ({host_work}): {r:#}");
}

#[test]
fn allocating_every_step_is_alloc_churn() {
    // 3000 steps. Planted once with two 100 µs kernels a step (ecd266d): on a GPU whose queue
    // pushes back that job is GPU-bound (its twins: without the churn x1.00, without the sync
    // x1.00), and the test asserted a verdict its own rig did not make true. With 20 µs
    // kernels the 4 allocations and frees (120 µs of host time) bound the step.
    let (r, _) = judged(&["--steps", "3000", "--driver-launches", "2", "--kernel-us", "20", "--alloc-churn", "4", "--sync"], &["alloc-churn", "host-sync"]);
    assert_eq!(r["verdict"], "alloc-churn", "{r:#}");
}

#[test]
fn large_kernels_are_gpu_bound_and_healthy() {
    let r = verdict(&["--steps", "100", "--driver-launches", "10", "--kernel-us", "500", "--sync"]);
    assert_eq!(r["verdict"], "gpu-bound", "{r:#}");
    assert!(problems(&r).is_empty(), "a healthy job gets no high/medium problem: {r:#}");
}

#[test]
fn a_periodic_save_of_device_state_is_checkpoint_stall_at_the_saving_function() {
    // Every 20 steps, 8 × 4 MiB copied to pageable memory, each written out after 5 ms of
    // serialization: ~45 ms of a ~6 ms step rhythm, with nothing launched meanwhile.
    let (r, _) = judged(
        &["--steps", "200", "--driver-launches", "20", "--kernel-us", "300", "--pinned-h2d", "65536", "--sync", "--checkpoint-every", "20"],
        &["checkpoint-stall", "host-sync"],
    );
    assert_eq!(r["verdict"], "checkpoint-stall", "{:#}", r["diagnoses"]);
    let d = &r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "checkpoint-stall").expect("found")["sites"];
    assert_eq!(d[0]["function"], "save_checkpoint", "{d:#}");
    assert!(!problems(&r).contains(&"pageable-copy".to_owned()), "the checkpoint's pageable copies are the checkpoint's: {:#}", r["diagnoses"]);
}

#[test]
fn copying_outputs_back_every_step_is_no_checkpoint() {
    let r = verdict(&["--steps", "200", "--driver-launches", "20", "--kernel-us", "300", "--blocking-d2h", "33554432", "--sync"]);
    let ids: Vec<&str> = r["diagnoses"].as_array().expect("diagnoses").iter().filter_map(|d| d["id"].as_str()).collect();
    assert!(!ids.contains(&"checkpoint-stall"), "{ids:?}");
}

/// A launching thread is accounted over its own life: the window's time before it was
/// created and after it exited is no sleep of its. fakejob's worker thread trains for a few
/// milliseconds; the process starts before it and, with `--hold-ms`, holds its memory on its
/// main thread for 1.5 s after it. Both were once a false `[HIGH] input-starved` (44 % and
/// 59 % "sleeping" while HOST said the thread slept 0 s).
#[test]
fn time_outside_the_launching_threads_life_is_not_sleep() {
    for hold in [None, Some("1500")] {
        let mut args = vec!["--steps", "300", "--driver-launches", "2", "--sync"];
        args.extend(hold.iter().flat_map(|ms| ["--hold-ms", ms]));
        let r = verdict(&args);
        assert!(!problems(&r).iter().any(|p| p == "input-starved"), "{r:#}");
        let sleeping = r["time_account"]["buckets"].as_array().expect("buckets").iter().find(|b| b["name"] == "sleeping").expect("sleeping")["fraction"]
            .as_f64()
            .expect("a number");
        assert!(sleeping < 0.10, "sleeping {sleeping}: {r:#}");
        let phases = r["window"]["phases"].as_array().expect("phases");
        assert!(phases.iter().any(|p| p["kind"] == "outside"), "the start-up is left out: {r:#}");
        if hold.is_some() {
            let active = r["window"]["active_s"].as_f64().expect("active_s");
            assert!(active < 0.5, "the 1.5 s hold after the loop is not active time: {r:#}");
        }
    }
}

/// A job whose every launch is a graph replay (as JAX's steps and torch.compile's
/// reduce-overhead are): its rates count the replays, no text divides by the zero kernel
/// launches (a JAX job read "0 kernel launches/s" and "each launch costs the host 11330.95
/// ms" with 34 931 replays counted), and it is not told to capture graphs it has.
#[test]
fn a_job_that_only_replays_graphs_has_its_replays_counted_in_every_rate_and_text() {
    let r = verdict(&["--steps", "1000", "--graphs", "200", "--kernel-us", "0", "--sync"]);
    assert_eq!(num(&r, "/cuda/launches/kernels"), 0, "{:#}", r["cuda"]["launches"]);
    assert_eq!(num(&r, "/cuda/launches/graphs"), 200_000, "{:#}", r["cuda"]["launches"]);
    let rate = r["cuda"]["launches"]["launch_rate_per_s"].as_f64().expect("launch_rate_per_s");
    assert!(rate > 10_000.0, "the replays are launches: {:#}", r["cuda"]["launches"]);
    // Words of the texts: an infinite or undefined figure prints as `inf` or `NaN`.
    let texts: Vec<String> = r["diagnoses"]
        .as_array()
        .expect("diagnoses")
        .iter()
        .flat_map(|d| [d["summary"].to_string(), d["evidence"].to_string(), d["saving"]["basis"].to_string()])
        .collect();
    for text in &texts {
        let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        assert!(!words.iter().any(|w| *w == "inf" || *w == "NaN"), "{text}");
        assert!(!text.contains(" 0 launches/s"), "{text}");
    }
    let launch = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "launch-bound").unwrap_or_else(|| panic!("launch-bound: {:#}", r["diagnoses"]));
    assert!(launch["summary"].as_str().is_some_and(|s| s.contains("replays")), "{launch:#}");
    let fix = launch["fix"].as_str().expect("a fix");
    assert!(fix.contains("each replay") && !fix.contains("CUDA graphs (torch.compile"), "a job with graphs is not told to capture graphs: {fix}");
}
