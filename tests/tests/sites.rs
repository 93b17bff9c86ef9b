//! Diagnoses name the code that causes them: the fake job's named functions, from its
//! frame-pointer stacks (sampled on CPU, or taken as the thread went off it) and its DWARF
//! lines.
use gputrace_tests::{require_root, run_fakejob, run_fakejob_opts};
use serde_json::Value;

fn diagnosis<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == id).unwrap_or_else(|| panic!("no {id} in {:#}", r["diagnoses"]))
}

fn functions(d: &Value) -> Vec<&str> {
    d["sites"].as_array().expect("sites is a list").iter().map(|s| s["function"].as_str().expect("function")).collect()
}

#[test]
fn host_code_between_launches_is_charged_to_the_function_that_computes() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "60", "--driver-launches", "2", "--host-us", "20000", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    let d = diagnosis(&r, "host-bound");
    assert_eq!(functions(d).first(), Some(&"compute_on_host"), "{d:#}");
    let top = &d["sites"][0];
    assert!(top["file"].as_str().is_some_and(|f| f.ends_with("fakejob.c")), "{top:#}");
    assert!(top["line"].as_u64().is_some_and(|l| l > 0), "{top:#}");
    assert!(top["frame"].as_str().is_some_and(|f| f.contains("fakejob.c:") && f.ends_with("in compute_on_host")), "{top:#}");
    // ~1.2 s of host work, sampled at 99 Hz: the site holds most of it.
    assert!(top["share"].as_f64().is_some_and(|s| s > 0.8), "{top:#}");
    assert!(top["seconds"].as_f64().is_some_and(|s| s > 0.6), "{top:#}");
}

#[test]
fn a_scalar_read_is_charged_to_the_function_that_reads_it() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"]);
    assert_eq!(code, 0, "{stderr}");
    let d = diagnosis(&r, "host-sync");
    assert_eq!(functions(d).first(), Some(&"read_scalar"), "{d:#}");
}

#[test]
fn no_stacks_means_no_sites() {
    require_root();
    let (r, code, stderr) = run_fakejob_opts(&["--no-stacks"], &["--steps", "60", "--driver-launches", "2", "--host-us", "20000", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    let d = diagnosis(&r, "host-bound");
    assert!(functions(d).is_empty(), "{d:#}");
    assert!(r["tracer"]["stacks"].is_null(), "{:#}", r["tracer"]["stacks"]);
}

#[test]
fn a_stripped_program_gets_addresses_and_a_report() {
    require_root();
    let dir = std::env::temp_dir().join(format!("gputrace-stripped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stripped = dir.join("fakejob");
    let status = std::process::Command::new("strip").arg("-o").arg(&stripped).arg(gputrace_tests::fakejob()).status().expect("strip runs");
    assert!(status.success());
    let out = std::process::Command::new(gputrace_tests::gputrace())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        .args(["run", "--json", "--"])
        .arg(&stripped)
        .args(["--steps", "40", "--driver-launches", "2", "--host-us", "20000", "--sync", "--lib-dir"])
        .arg(gputrace_tests::fake_cuda_dir())
        .output()
        .expect("gputrace runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = gputrace_tests::report_json(&out.stdout);
    let d = diagnosis(&r, "host-bound");
    // No symbol names the spinning function: the site is whatever the stripped file still
    // names (its dynamic symbols) or an address, never the function's real name.
    assert!(!functions(d).contains(&"compute_on_host"), "{d:#}");
}

#[test]
fn a_recording_keeps_the_sites_for_the_report_made_later() {
    require_root();
    let r = gputrace_tests::record_then_report("sites-rec", &["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"]);
    assert_eq!(functions(diagnosis(&r, "host-sync")).first(), Some(&"read_scalar"), "{:#}", r["diagnoses"]);
}

/// The sites of the three planted problems of a job built `-O2` without frame pointers
/// (`o2/`): host work, a per-step read, an allocation that grows. The kernel's frame-pointer
/// walk stops in libc or the vDSO there; the copied stacks unwound by `.eh_frame` reach the job.
fn optimized_sites(program: &str) -> [Value; 3] {
    let dir = gputrace_tests::optimized_dir();
    let host = ["--steps", "60", "--driver-launches", "2", "--host-us", "20000", "--sync"];
    let read = ["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"];
    let grow = ["--steps", "400", "--driver-launches", "20", "--kernel-us", "300", "--sync", "--leak", "1048576"];
    [&host[..], &read[..], &grow[..]].map(|args| {
        let (r, code, stderr) = gputrace_tests::run_job_in(&dir, program, args);
        assert_eq!(code, 0, "{stderr}");
        r
    })
}

/// The first site of diagnosis `id`, and the report's stack counts.
fn first_site<'a>(r: &'a Value, id: &str) -> &'a Value {
    let d = diagnosis(r, id);
    d["sites"].get(0).unwrap_or_else(|| panic!("no site for {id}: {d:#}\ntracer.stacks: {:#}", r["tracer"]["stacks"]))
}

#[test]
fn a_job_built_without_frame_pointers_is_named_at_its_own_functions_and_lines() {
    require_root();
    let [host, read, grow] = optimized_sites("fakejob");
    for (r, id, function) in [(&host, "host-bound", "compute_on_host"), (&read, "host-sync", "read_scalar"), (&grow, "memory-growth", "keep_activations")] {
        let site = first_site(r, id);
        assert_eq!(site["function"], function, "{id}: {site:#}\n{:#}", r["tracer"]["stacks"]);
        assert!(site["file"].as_str().is_some_and(|f| f.ends_with("fakejob.c")) && site["line"].as_u64().is_some_and(|l| l > 0), "{site:#}");
    }
    // Host work is sampled on the CPU: the stacks reach the job, not a libc or vDSO frame.
    let stacks = &host["tracer"]["stacks"];
    let (taken, usable) = (stacks["taken"].as_u64().expect("taken"), stacks["usable"].as_u64().expect("usable"));
    assert!(taken > 50 && usable * 10 >= taken * 9, "{stacks:#}");
    assert_eq!(host["tracer"]["stacks"]["processes"][0]["taken"], taken, "{stacks:#}");
}

#[test]
fn a_job_without_frame_pointers_or_debug_information_is_named_at_its_functions() {
    require_root();
    let [host, read, grow] = optimized_sites("fakejob-nodebug");
    for (r, id, function) in [(&host, "host-bound", "compute_on_host"), (&read, "host-sync", "read_scalar"), (&grow, "memory-growth", "keep_activations")] {
        let site = first_site(r, id);
        assert_eq!(site["function"], function, "{id}: {site:#}");
        assert!(site["line"].is_null(), "no line tables, no line: {site:#}");
    }
}

#[test]
fn a_sync_waiting_for_the_gpu_is_named_at_its_call_from_the_stack_it_was_entered_with() {
    require_root();
    // The -O2 job's blocking read (async D2H, then cudaStreamSynchronize waiting ~2 ms for the
    // kernels) sits in `worker`, where it is inlined: the site is the sync's own line, each
    // call's wait counted under the stack the call was entered with.
    let dir = gputrace_tests::optimized_dir();
    let args = ["--steps", "200", "--driver-launches", "2", "--kernel-us", "2000", "--blocking-d2h", "4096", "--host-us", "1000"];
    let (r, code, stderr) = gputrace_tests::run_job_in(&dir, "fakejob", &args);
    assert_eq!(code, 0, "{stderr}");
    let site = first_site(&r, "host-sync");
    let line = site["line"].as_u64().unwrap_or_else(|| panic!("a line: {site:#}")) as usize;
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fake-cuda/fakejob.c")).expect("the job's source");
    let text = source.lines().nth(line - 1).unwrap_or_default();
    assert!(text.contains("rt_stream_sync"), "line {line} is `{}`: {site:#}", text.trim());
    assert!(site["stacks"].as_u64().is_some_and(|n| n >= 150), "about one stack a sync: {site:#}");
}
