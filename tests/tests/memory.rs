//! Where the GPU memory is: a job that allocates every step and never frees (`memory-growth`
//! at the right rate, charged to the allocating function, in C and in Python), a caching
//! allocator's out-of-memory retry path (`fragmentation`), an allocation that fails for good
//! (`oom`), and the healthy twin that raises none of them. At the tensor level, PyTorch's
//! caching allocator faked with its own C++ symbols (`fake-cuda/libc10_cuda.cpp`): the exact
//! live bytes, the line that made the kept blocks, a hook of another signature left alone, and
//! an out-of-memory exception thrown through the probed allocator.
use std::process::Command;

use gputrace_tests::{fake_cuda_dir, gputrace, num, require_root, run_fakejob};
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn ids(r: &Value) -> Vec<&str> {
    r["diagnoses"].as_array().expect("diagnoses").iter().map(|d| d["id"].as_str().expect("id")).collect()
}

fn diagnosis<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == id).unwrap_or_else(|| panic!("no {id} in {:#}", r["diagnoses"]))
}

fn top_site(d: &Value) -> &Value {
    d["sites"].get(0).unwrap_or_else(|| panic!("no site in {d:#}"))
}

/// `work_ns N` as the fake job prints it with `--print-time`.
fn work_s(stderr: &str) -> f64 {
    stderr.lines().find_map(|l| l.strip_prefix("work_ns ")).and_then(|n| n.trim().parse::<f64>().ok()).map_or(0.0, |ns| ns / 1e9)
}

const STEADY: [&str; 8] = ["--steps", "400", "--driver-launches", "20", "--kernel-us", "300", "--sync", "--print-time"];

#[test]
fn a_job_that_keeps_every_steps_memory_grows_at_its_rate_from_its_function() {
    require_root();
    let args: Vec<&str> = STEADY.iter().copied().chain(["--leak", "1048576"]).collect();
    let (r, code, stderr) = run_fakejob(&args);
    assert_eq!(code, 0, "{stderr}");
    // Every step's MiB is still reserved at the end; the 64 MiB work buffer was freed.
    assert_eq!(num(&r, "/memory/reserved_bytes"), 400 * MIB);
    assert_eq!(num(&r, "/memory/peak_reserved_bytes"), 464 * MIB);
    let d = diagnosis(&r, "memory-growth");
    assert_eq!(top_site(d)["function"], "keep_activations", "{d:#}");
    // The job grows 1 MiB a step, evenly through its work.
    let expected = 400.0 * MIB as f64 / work_s(&stderr);
    let rate = r["memory"]["growth_bytes_per_s"].as_f64().expect("a growth rate");
    assert!((rate / expected - 1.0).abs() < 0.25, "growth {rate:.0} B/s, expected about {expected:.0}");
    assert!(!ids(&r).contains(&"alloc-churn"), "allocations never freed are growth, not churn: {:?}", ids(&r));
    let timeline = r["memory"]["timeline"].as_array().expect("a timeline");
    assert!(timeline.len() >= 2 && timeline.windows(2).all(|w| w[0]["t_s"].as_f64() < w[1]["t_s"].as_f64()), "{timeline:#?}");
}

/// Issue 38: 300 steps of 2.5 ms that each keep 16 MiB (4.7 GiB in under a second, never
/// freed): too short to judge growth per second, plain per step.
#[test]
fn a_short_job_that_keeps_16_mib_a_step_grows_per_step() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "300", "--driver-launches", "5", "--kernel-us", "500", "--sync", "--leak", "16777216"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(r["window"]["duration_s"].as_f64() < Some(2.0), "the per-second rule needs 2 s: {:#}", r["window"]);
    let d = diagnosis(&r, "memory-growth");
    assert_eq!(top_site(d)["function"], "keep_activations", "{d:#}");
    assert!(d["summary"].as_str().is_some_and(|s| s.contains(" a step (")), "{d:#}");
    let per_step = r["memory"]["growth_bytes_per_step"].as_f64().expect("a growth per step");
    assert!((per_step / (16 * MIB) as f64 - 1.0).abs() < 0.1, "{per_step:.0} B a step: {:#}", r["memory"]);
}

#[test]
fn the_healthy_twin_raises_no_memory_problem() {
    require_root();
    let (r, code, stderr) = run_fakejob(&STEADY);
    assert_eq!(code, 0, "{stderr}");
    for id in ["memory-growth", "fragmentation", "oom", "alloc-churn"] {
        assert!(!ids(&r).contains(&id), "{id} in a healthy job: {:#}", r["diagnoses"]);
    }
    assert!(r["memory"]["growth_bytes_per_s"].is_null(), "{:#}", r["memory"]);
    assert_eq!(num(&r, "/memory/out_of_memory"), 0);
}

/// `STEPS` steps of 5 launches of 300 µs kernels, with a synchronize, on a fake GPU of
/// 256 MiB behind fakejob's caching allocator, plus `extra`.
fn run_caching_job(steps: &str, extra: &[&str]) -> (Value, i32, String) {
    let base = ["--steps", steps, "--driver-launches", "5", "--kernel-us", "300", "--sync", "--device-memory-mib", "256"];
    let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
    run_fakejob(&args)
}

#[test]
fn failed_allocations_retried_after_freeing_the_cache_are_fragmentation() {
    require_root();
    // The job stays alive 0.5 s after its work, as any real job outlives the tracer's 200 ms
    // rescan: a job of 0.1 s can be gone before its allocation records are read, and with it
    // the memory map that names their stacks (docs/architecture.md, known limits).
    let (r, code, stderr) = run_caching_job("100", &["--cache-pct", "30", "--hold-ms", "500"]);
    assert_eq!(code, 0, "{stderr}");
    let retried = num(&r, "/memory/recovered_by_retry");
    assert!(retried > 0, "{:#}", r["memory"]);
    assert_eq!(num(&r, "/memory/out_of_memory"), retried, "every failure was retried");
    assert_eq!(num(&r, "/memory/failed_for_good"), 0);
    let d = diagnosis(&r, "fragmentation");
    assert_eq!(top_site(d)["function"], "cached_malloc", "{d:#}");
    assert!(!ids(&r).contains(&"oom"), "{:?}", ids(&r));
}

#[test]
fn an_allocation_that_fails_after_its_retry_is_oom_at_its_call() {
    require_root();
    // The job works for ~0.3 s, as a real one does before it dies of an out-of-memory: a job
    // of 5 ms is shorter than one wakeup of the reader (docs/architecture.md, known limits).
    let (r, code, stderr) = run_caching_job("200", &["--oom-at-end", "1073741824"]);
    assert_eq!(code, 3, "the job dies of it: {stderr}");
    assert_eq!(num(&r, "/memory/out_of_memory"), 2, "the request and its retry");
    assert_eq!(num(&r, "/memory/failed_for_good"), 1);
    let d = diagnosis(&r, "oom");
    assert_eq!(d["severity"], "high");
    assert!(d["summary"].as_str().is_some_and(|s| s.contains("1.0 GiB")), "{d:#}");
    // The job died right after: its stack is still named.
    assert_eq!(top_site(d)["function"], "cached_malloc", "{d:#}");
    // Its worker thread's short life is its whole account: no false input-starved (it once
    // read 95 % "sleeping", the time before and after the thread lived).
    assert!(!ids(&r).contains(&"input-starved"), "{:?}", ids(&r));
}

#[test]
fn a_python_loop_that_keeps_its_activations_names_the_python_function() {
    require_root();
    let dir = fake_cuda_dir();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-cuda/leak.py");
    let out = Command::new(gputrace())
        .env("LD_LIBRARY_PATH", &dir)
        .args(["run", "--json", "--", "python3"])
        .arg(&script)
        .arg(&dir)
        .arg("400")
        .output()
        .expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r = gputrace_tests::report_json(&out.stdout);
    assert_eq!(num(&r, "/memory/reserved_bytes"), 400 * MIB);
    let d = diagnosis(&r, "memory-growth");
    let site = top_site(d);
    assert_eq!(site["function"], "forward", "{d:#}");
    assert!(site["file"].as_str().is_some_and(|f| f.ends_with("leak.py")), "{site:#}");
}

#[test]
fn a_recording_keeps_the_memory_view_and_its_sites() {
    require_root();
    let args: Vec<&str> = STEADY.iter().copied().chain(["--leak", "1048576"]).collect();
    let r = gputrace_tests::record_then_report("memory-rec", &args);
    assert_eq!(num(&r, "/memory/reserved_bytes"), 400 * MIB);
    assert_eq!(top_site(diagnosis(&r, "memory-growth"))["function"], "keep_activations", "{:#}", r["diagnoses"]);
}

/// `tensor_leak.py` on the fake caching allocator in `c10` (or `c10-other`), 200 steps,
/// under `--tensors`.
fn tensor_job(c10: &str, extra: &[&str]) -> Value {
    tensor_job_traced(&["--tensors"], c10, extra)
}

/// The same, with `flags` for gputrace.
fn tensor_job_traced(flags: &[&str], c10: &str, extra: &[&str]) -> Value {
    let dir = fake_cuda_dir();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-cuda/tensor_leak.py");
    let out = Command::new(gputrace())
        .env("LD_LIBRARY_PATH", &dir)
        // Every block's frames (a random one in 16 by default): 200 steps are too few for a
        // sample to name a line every time.
        .env("GPUTRACE_PY_FRAMES_ONE_IN", "1")
        .args(["run", "--json"])
        .args(flags)
        .args(["--", "python3"])
        .arg(&script)
        .arg(&dir)
        .arg(dir.join(c10))
        .arg("200")
        .args(extra)
        .output()
        .expect("gputrace runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    gputrace_tests::report_json(&out.stdout)
}

#[test]
fn a_tensor_kept_every_step_is_charged_to_the_line_that_made_it_with_its_exact_live_bytes() {
    require_root();
    // With --throw the job first asks for more than the GPU has and catches the allocator's
    // exception: a return probe on the allocator's path would break that unwinding (the job
    // would end in std::terminate), so its probe is entry-only.
    let r = tensor_job("c10", &["--throw"]);
    // 200 steps of four 256 KiB temporaries given back and one 1 MiB output kept.
    assert_eq!(num(&r, "/memory/tensors/blocks"), 1000, "{:#}", r["memory"]);
    assert_eq!(num(&r, "/memory/tensors/frees"), 800);
    assert_eq!(num(&r, "/memory/tensors/allocated_bytes"), 200 * MIB);
    // The allocator's own totals: the kept MiB, and the segments reserved for them and for
    // the temporaries.
    assert_eq!(num(&r, "/memory/tensors/allocator_allocated_bytes"), 200 * MIB);
    assert_eq!(num(&r, "/memory/tensors/allocator_reserved_bytes"), num(&r, "/memory/reserved_bytes"));
    // Over time: the tensors' bytes grow to the kept 200 MiB, never above the segments'.
    let timeline = r["memory"]["timeline"].as_array().expect("a timeline");
    let tensors: Vec<u64> = timeline.iter().filter_map(|p| p["tensor_bytes"].as_u64()).collect();
    assert_eq!(tensors.last(), Some(&(200 * MIB)), "{timeline:#?}");
    assert!(tensors.windows(2).all(|w| w[0] <= w[1]), "{timeline:#?}");
    assert!(timeline.iter().all(|p| p["tensor_bytes"].as_u64().is_none_or(|t| t <= p["reserved_bytes"].as_u64().unwrap_or(0))), "{timeline:#?}");
    let d = diagnosis(&r, "memory-growth");
    let site = top_site(d);
    // The blocks still live were made in make_output(); the driver saw only the segments.
    assert_eq!(site["function"], "make_output", "{d:#}");
    assert!(site["file"].as_str().is_some_and(|f| f.ends_with("tensor_leak.py")), "{site:#}");
    assert!(d["evidence"].as_array().expect("evidence").iter().any(|e| e.as_str().is_some_and(|e| e.contains("in tensors"))), "{d:#}");
}

#[test]
fn a_tensor_op_that_returns_at_once_is_charged_to_its_own_line_read_in_the_probe_not_the_last_steps_gradients() {
    require_root();
    // make_output() returns as soon as its block is handed out and the step spends its time in
    // fill(): a read of the thread's Python frames from outside, even 0.2 ms late, finds it in
    // fill(). The probe reads them at the call itself (tracer-ebpf/src/python_frames.rs).
    // Each step also makes 256 MiB of gradients, given back at the next: the last step's are
    // live at the end, more than all the kept outputs, but they are no leak.
    let r = tensor_job("c10", &["--quick-output", "--grads-mib", "256"]);
    assert_eq!(num(&r, "/memory/tensors/allocated_bytes"), 456 * MIB, "{:#}", r["memory"]);
    let d = diagnosis(&r, "memory-growth");
    let site = top_site(d);
    let script =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-cuda/tensor_leak.py")).expect("the script");
    let line = script.lines().position(|l| l.contains("# the output's block")).expect("the allocating line") + 1;
    assert_eq!((site["function"].as_str(), site["line"].as_u64()), (Some("make_output"), Some(line as u64)), "{d:#}");
    assert!(site["share"].as_f64().is_some_and(|s| s > 0.9), "{d:#}");
}

#[test]
fn the_tensor_twin_that_gives_its_outputs_back_grows_not() {
    require_root();
    let r = tensor_job("c10", &["--no-leak"]);

    assert_eq!(num(&r, "/memory/tensors/blocks"), 1000, "{:#}", r["memory"]);
    assert_eq!(num(&r, "/memory/tensors/frees"), 1000);
    assert_eq!(num(&r, "/memory/tensors/allocated_bytes"), 0);
    assert!(!ids(&r).contains(&"memory-growth"), "{:?}", ids(&r));
}

#[test]
fn an_allocator_hook_of_another_signature_is_left_alone_with_a_note() {
    require_root();
    let r = tensor_job("c10-other", &[]);
    assert!(r["memory"].get("tensors").is_none(), "{:#}", r["memory"]);
    let notes = r["tracer"]["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("caching allocator's functions were not found"))), "{notes:#?}");
    // The leak is still found, from the segments the driver saw.
    assert!(ids(&r).contains(&"memory-growth"), "{:?}", ids(&r));
}

#[test]
fn an_overhead_budget_takes_the_allocators_probes_off_for_good_and_says_so() {
    require_root();
    // A budget far below what a trap per tensor costs.
    let r = tensor_job_traced(&["--tensors", "--max-overhead", "0.01"], "c10", &[]);
    let until = r["memory"]["tensors"]["until_s"].as_f64().unwrap_or_else(|| panic!("no until_s in {:#}", r["memory"]));
    let window = num_f(&r, "/window/duration_s");
    assert!(until > 0.0 && until < window, "{until} of {window}");
    // Fewer than the job's 1000 blocks were counted, and none is charged after the cut.
    assert!(num(&r, "/memory/tensors/blocks") < 1000, "{:#}", r["memory"]);
    let notes = r["tracer"]["notes"].as_array().expect("notes");
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains("caching allocator's probes"))), "{notes:#?}");
}

fn num_f(r: &Value, pointer: &str) -> f64 {
    r.pointer(pointer).and_then(Value::as_f64).unwrap_or_else(|| panic!("no {pointer}"))
}

#[test]
fn a_leak_inside_the_allocators_cache_is_growth_of_the_tensors() {
    require_root();
    // 256 MiB reserved up front: the 200 kept MiB never make the allocator reserve more.
    let r = tensor_job("c10", &["--reserve-mib", "256"]);
    assert_eq!(num(&r, "/memory/reserved_bytes"), 256 * MIB, "{:#}", r["memory"]);
    assert_eq!(num(&r, "/memory/tensors/allocated_bytes"), 200 * MIB);
    let d = diagnosis(&r, "memory-growth");
    assert!(d["evidence"][0].as_str().is_some_and(|e| e.starts_with("in live tensors")), "{d:#}");
    assert_eq!(top_site(d)["function"], "make_output", "{d:#}");
}

#[test]
fn without_tensors_the_allocator_is_left_alone_and_the_fix_says_how_to_name_the_line() {
    require_root();
    let r = tensor_job_traced(&[], "c10", &[]);
    assert!(r["memory"].get("tensors").is_none(), "{:#}", r["memory"]);
    let libraries = r["tracer"]["libraries"].as_array().expect("libraries");
    assert!(!libraries.iter().any(|l| l["path"].as_str().is_some_and(|p| p.ends_with("libc10_cuda.so"))), "{libraries:#?}");
    let d = diagnosis(&r, "memory-growth");
    assert!(d["fix"].as_str().is_some_and(|f| f.contains("--tensors")), "{d:#}");
}
