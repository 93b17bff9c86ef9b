//! `gputrace doctor` (issue 35): the host's checks as root and as a plain user, the GPU's
//! skipped with their reason where there is no NVML, and faults planted in the fake NVML
//! (a narrow PCIe link, thermal throttling, persistence off, a driver older than the job's
//! CUDA runtime) each named, a failure making the command exit 1.
use std::process::Command;

use gputrace_tests::{fakejob, gputrace, require_root, FakeNvml, Gated};
use serde_json::Value;

const CHECKS: [&str; 14] = [
    "privileges",
    "kernel",
    "uprobes",
    "btf",
    "multi-uprobe-links",
    "perf-events",
    "nvml",
    "pcie-link",
    "numa",
    "clocks",
    "persistence",
    "mig",
    "other-processes",
    "cuda-versions",
];

fn doctor(command: &mut Command) -> (Value, i32, String) {
    let out = command.output().expect("gputrace doctor runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr}"));
    (report, out.status.code().unwrap_or(-1), stderr)
}

fn check<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["checks"].as_array().expect("checks").iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} in {r:#}"))
}

#[test]
fn as_root_without_nvml_the_host_passes_and_each_gpu_check_says_why_it_is_skipped() {
    require_root();
    let (r, code, stderr) = doctor(Command::new(gputrace()).args(["doctor", "--json"]).env_remove("LD_LIBRARY_PATH"));
    assert_eq!(code, 0, "{stderr}\n{r:#}");
    let names: Vec<&str> = r["checks"].as_array().expect("checks").iter().map(|c| c["name"].as_str().expect("name")).collect();
    assert_eq!(names, CHECKS);
    for name in ["privileges", "uprobes", "btf"] {
        assert_eq!(check(&r, name)["status"], "pass", "{r:#}");
    }
    // This kernel's BTF places every member the raw tracepoints read.
    assert!(check(&r, "btf")["detail"].as_str().is_some_and(|d| d.contains("every member")), "{r:#}");
    assert_eq!(check(&r, "nvml")["status"], "skip");
    assert!(check(&r, "nvml")["detail"].as_str().is_some_and(|d| d.contains("NVML is unavailable")), "{r:#}");
    assert!(CHECKS[8..].iter().all(|n| check(&r, n)["status"] == "skip"), "{r:#}");
    assert_eq!(r["fails"], 0);
}

#[test]
fn a_plain_user_fails_the_privileges_check_and_is_told_to_use_root() {
    require_root();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(gputrace())
        .arg("doctor")
        .output()
        .expect("setpriv runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.lines().any(|l| l.starts_with("fail  privileges") && l.contains("sudo")), "{text}");
    assert!(text.contains("skip  multi-uprobe-links"), "{text}");
    assert!(text.trim_end().ends_with("warning(s)"), "{text}");
}

#[test]
fn faults_planted_in_the_fake_nvml_are_named_and_a_runtime_newer_than_the_driver_fails() {
    require_root();
    let nvml = FakeNvml::new();
    // A job holding the fake GPU (its CUDA runtime is libcudart.so.13), waiting at its gate.
    let mut job = Gated::spawn(nvml.apply(Command::new(fakejob()).arg("--gate").args(["--steps", "1", "--driver-launches", "1"])));
    let plant = |c: &mut Command| {
        c.env("FAKE_NVML_PCIE", "5,5,8,16").env("FAKE_NVML_THROTTLE", "0x40").env("FAKE_NVML_PERSISTENCE", "0");
    };
    let mut command = Command::new(gputrace());
    nvml.apply(&mut command).args(["doctor", "--json", "--pid"]).arg(job.pid.to_string()).env("FAKE_NVML_CUDA_VERSION", "12040");
    plant(&mut command);
    let (r, code, stderr) = doctor(&mut command);
    assert_eq!(r["pid"], job.pid);
    assert_eq!(check(&r, "nvml")["status"], "pass", "{r:#}");
    assert!(check(&r, "nvml")["detail"].as_str().is_some_and(|d| d.contains("Fake GPU")), "{r:#}");
    assert_eq!(check(&r, "pcie-link")["status"], "warn", "{r:#}");
    assert!(check(&r, "pcie-link")["detail"].as_str().is_some_and(|d| d.contains("x8 of Gen5 x16")), "{r:#}");
    assert_eq!(check(&r, "clocks")["status"], "warn", "{r:#}");
    assert!(check(&r, "clocks")["detail"].as_str().is_some_and(|d| d.contains("thermal")), "{r:#}");
    assert_eq!(check(&r, "persistence")["status"], "warn", "{r:#}");
    // The only process on the fake GPU is the job itself.
    assert_eq!(check(&r, "other-processes")["status"], "pass", "{r:#}");
    assert_eq!(check(&r, "cuda-versions")["status"], "fail", "{r:#}");
    assert!(check(&r, "cuda-versions")["detail"].as_str().is_some_and(|d| d.contains("CUDA 12.4") && d.contains("runtime is 13")), "{r:#}");
    assert_eq!(code, 1, "a failed check exits 1: {stderr}");
    // A driver new enough: no failure, exit 0.
    let mut command = Command::new(gputrace());
    nvml.apply(&mut command).args(["doctor", "--json", "--pid"]).arg(job.pid.to_string()).env("FAKE_NVML_CUDA_VERSION", "13000");
    plant(&mut command);
    let (r, code, stderr) = doctor(&mut command);
    assert_eq!(check(&r, "cuda-versions")["status"], "pass", "{r:#}");
    assert_eq!(code, 0, "{stderr}");
    job.release();
    job.finish();
}

#[test]
fn a_pid_that_does_not_exist_is_a_clear_error() {
    let out = Command::new(gputrace()).args(["doctor", "--pid", "999999999"]).output().expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no process with pid 999999999"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// The doctor's link check in a report, beside the copies it slows: a job copying 8 MiB a
/// step from pageable memory on a GPU whose link runs at Gen3 x8 under load (of Gen5 x16) is
/// told so in the report's notes, and pinning is promised less there (the bus as it ran is
/// the floor of the step: 8 MiB take ~1.3 ms at Gen3 x8, more than the step); the same job on
/// a full link gets `pageable-copy` first and no note.
#[test]
fn a_link_trained_down_under_load_is_noted_beside_the_copies_it_slows() {
    require_root();
    let job = ["--steps", "150", "--driver-launches", "5", "--kernel-us", "20", "--pageable-h2d", "8388608", "--host-us", "100"];
    let traced = |pcie: &str| {
        let nvml = FakeNvml::new();
        let mut command = Command::new(gputrace());
        nvml.apply(&mut command).env("FAKE_NVML_PCIE", pcie).args(["run", "--json", "--"]).arg(fakejob()).args(job);
        let out = command.output().expect("gputrace runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        gputrace_tests::report_json(&out.stdout)
    };
    let pageable = |r: &Value| r["diagnoses"].as_array().and_then(|ds| ds.iter().find(|d| d["id"] == "pageable-copy")).cloned().unwrap_or_else(|| panic!("no pageable-copy: {:#}", r["diagnoses"]));
    let speedup = |r: &Value| pageable(r)["saving"]["speedup"].as_f64().unwrap_or_else(|| panic!("a saving: {:#}", pageable(r)));
    let narrow = traced("3,5,8,16");
    assert_eq!(narrow["gpu"]["devices"][0]["pcie_under_load"], serde_json::json!({"gen": 3, "width": 8}), "{:#}", narrow["gpu"]);
    let notes = narrow["tracer"]["notes"].to_string();
    assert!(notes.contains("Gen3 x8 of Gen5 x16") && notes.contains("bearing on pageable-copy"), "{notes}");
    let full = traced("5,5,16,16");
    assert_eq!(full["verdict"], "pageable-copy", "{:#}", full["diagnoses"]);
    assert!(!full["tracer"]["notes"].to_string().contains("pcie-link"), "{:#}", full["tracer"]["notes"]);
    assert!(speedup(&narrow) < speedup(&full), "pinning buys less on the narrow link: {:#} against {:#}", pageable(&narrow)["saving"], pageable(&full)["saving"]);
}
