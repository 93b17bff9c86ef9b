//! Jobs that look like a framework to gputrace (its Python files installed under
//! `site-packages/`, `tests/fake-cuda/frameworks/`), driving the fake CUDA through ctypes:
//! the framework is named, the time beneath its entry call is split by the framework's own
//! parts, and the fix is said in its terms (issue 35).

use std::process::Command;

use gputrace_tests::{fake_cuda_dir, gputrace, report_json, require_root};
use serde_json::Value;

fn run_python_job(script: &str, steps: &str) -> Value {
    run_python_job_with(script, &[steps])
}

fn run_python_job_with(script: &str, args: &[&str]) -> Value {
    // A job whose thread waited for a CPU most of its window says so (`cpu-starved` first):
    // that is the 2-core machine's state, not the framework's, and it has come 1 run in ~10
    // when these jobs run back to back (2026-12-04). Such a run is made again, twice at most;
    // the report of the last is judged whatever it says.
    let mut report = run_python_once(script, args);
    for _ in 0..2 {
        if report["diagnoses"][0]["id"] != "cpu-starved" {
            break;
        }
        eprintln!("{script}: cpu-starved first (the machine was busy); once more");
        report = run_python_once(script, args);
    }
    report
}

fn run_python_once(script: &str, args: &[&str]) -> Value {
    let dir = fake_cuda_dir();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-cuda/frameworks").join(script);
    let out = Command::new(gputrace())
        .env("LD_LIBRARY_PATH", &dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["run", "--json", "--", "python3"])
        .arg(&script)
        .arg(&dir)
        .args(args)
        .output()
        .expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    report_json(&out.stdout)
}

fn diagnosis<'r>(r: &'r Value, id: &str) -> &'r Value {
    r["diagnoses"].as_array().and_then(|ds| ds.iter().find(|d| d["id"] == id)).unwrap_or_else(|| panic!("no {id}: {:#}", r["diagnoses"]))
}

#[test]
fn a_lightning_fit_is_split_by_lightnings_own_parts_and_told_lightnings_knobs() {
    require_root();
    // 300 steps of 3 ms of progress bar after two 50 µs kernels and a sync: the GPU idles.
    // (What moving that work off the step buys depends on the free cores, one on a 2-core
    // machine: the verdict's rank is not this test's business.)
    let r = run_python_job("lightning_job.py", "300");
    assert_eq!(r["target"]["framework"], "lightning", "{:#}", r["target"]);
    let d = diagnosis(&r, "host-bound");
    let site = &d["sites"][0];
    assert!(site["file"].as_str().is_some_and(|f| f.ends_with("lightning_job.py")), "the user's fit(...) line: {site:#}");
    let inside = &site["inside"];
    assert_eq!(inside["package"], "lightning", "{site:#}");
    let first = &inside["parts"][0];
    assert!(first["frame"].as_str().is_some_and(|f| f.contains("on_train_batch_end")), "the progress bar first: {inside:#}");
    assert!(first["share"].as_f64().is_some_and(|s| s > 0.7), "{inside:#}");
    let fix = d["fix"].as_str().unwrap_or_default();
    assert!(fix.contains("Lightning") && fix.contains("enable_progress_bar"), "{fix}");
    // The 0.4 s of set-up before the first launch is no site of any diagnosis (Python frames
    // are kept from the tree's first GPU work on: under `run`, imports came first).
    assert!(!r["diagnoses"].to_string().contains("prepare_dataset"), "{:#}", r["diagnoses"]);
}

#[test]
fn a_jitted_jax_step_is_told_to_do_more_per_dispatch_not_to_add_loader_workers() {
    require_root();
    let r = run_python_job("jax_job.py", "300");
    assert_eq!(r["target"]["framework"], "jax", "{:#}", r["target"]);
    // The dispatch's diagnosis wherever it ranks: on two busy cores `cpu-starved` has come
    // first (the thread runnable 60 % of a window while kernel workers ran).
    let d = r["diagnoses"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["id"] == "launch-bound" || d["id"] == "host-bound"))
        .unwrap_or_else(|| panic!("no launch-bound or host-bound: {:#}", r["diagnoses"]));
    let fix = d["fix"].as_str().unwrap_or_default();
    assert!(fix.contains("jax.lax.scan") && !fix.contains("DataLoader"), "{fix}");
    // The site is the user's call of the jitted step, split by JAX's dispatch beneath it.
    let site = &d["sites"][0];
    assert!(site["file"].as_str().is_some_and(|f| f.ends_with("jax_job.py")), "{site:#}");
    assert_eq!(site["inside"]["package"], "jax", "{site:#}");
}

/// The fix of the host-side diagnosis of a job whose steps wait on 3 ms of host work inside
/// its framework. Not necessarily the verdict: on two busy cores the same job has read
/// `cpu-starved` first (its thread runnable half the window while kernel workers ran), which
/// is the machine's doing, not the framework's.
fn host_side_fix(r: &Value) -> String {
    let host_side = r["diagnoses"].as_array().and_then(|ds| ds.iter().find(|d| d["id"] == "host-bound" || d["id"] == "input-starved"));
    let d = host_side.unwrap_or_else(|| panic!("no host-bound or input-starved: {:#}", r["diagnoses"]));
    d["fix"].as_str().unwrap_or_default().to_owned()
}

/// The same planted step (two 50 µs kernels, a sync, 3 ms of host work inside the framework)
/// under each framework's layout: each is named, and told its own knobs and no other's.
#[test]
fn each_framework_is_named_and_told_its_own_knobs() {
    require_root();
    let knobs = [
        ("pytorch", "pytorch", "num_workers"),
        ("hf", "hf-trainer", "TrainingArguments(dataloader_num_workers"),
        ("deepspeed", "deepspeed", "wall_clock_breakdown"),
        ("tensorflow", "tensorflow", "tf.data.AUTOTUNE"),
    ];
    // Each framework's own words, which no other framework's fix may use.
    let own = [("hf-trainer", "TrainingArguments"), ("deepspeed", "wall_clock_breakdown"), ("tensorflow", "tf.data"), ("lightning", "Lightning"), ("jax", "jax.")];
    for (job, framework, knob) in knobs {
        let r = run_python_job_with("framework_job.py", &["300", job]);
        assert_eq!(r["target"]["framework"], framework, "{job}: {:#}", r["target"]);
        let fix = host_side_fix(&r);
        assert!(fix.contains(knob), "{job}: {fix}");
        for (_, word) in own.iter().filter(|(owner, _)| *owner != framework) {
            assert!(!fix.contains(word), "{job} is told {word}: {fix}");
        }
    }
}
