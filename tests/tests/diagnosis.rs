//! Planted bottlenecks get the right verdict; healthy jobs get no high or medium problem.
use gputrace_tests::{require_root, run_fakejob};

fn verdict(args: &[&str]) -> serde_json::Value {
    require_root();
    let (r, code, stderr) = run_fakejob(args);
    assert_eq!(code, 0, "{stderr}");
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

#[test]
fn tiny_kernels_launched_one_by_one_are_launch_bound() {
    let r = verdict(&["--steps", "200", "--driver-launches", "200", "--kernel-us", "1", "--sync"]);
    assert_eq!(r["verdict"], "launch-bound", "{r:#}");
}

#[test]
fn pageable_copies_are_found() {
    let r = verdict(&["--steps", "100", "--driver-launches", "5", "--kernel-us", "20", "--pageable-h2d", "8388608", "--host-us", "100"]);
    assert!(problems(&r).contains(&"pageable-copy".to_owned()), "{r:#}");
}

#[test]
fn a_scalar_read_every_step_is_host_sync() {
    let r = verdict(&["--steps", "200", "--driver-launches", "20", "--kernel-us", "50", "--item", "1", "--host-us", "1500"]);
    assert_eq!(r["verdict"], "host-sync", "{r:#}");
}

#[test]
fn allocating_every_step_is_alloc_churn() {
    let r = verdict(&["--steps", "300", "--driver-launches", "2", "--kernel-us", "100", "--alloc-churn", "4", "--sync"]);
    assert!(problems(&r).contains(&"alloc-churn".to_owned()) || r["diagnoses"].to_string().contains("alloc-churn"), "{r:#}");
}

#[test]
fn large_kernels_are_gpu_bound_and_healthy() {
    let r = verdict(&["--steps", "100", "--driver-launches", "10", "--kernel-us", "500", "--sync"]);
    assert_eq!(r["verdict"], "gpu-bound", "{r:#}");
    assert!(problems(&r).is_empty(), "a healthy job gets no high/medium problem: {r:#}");
}
