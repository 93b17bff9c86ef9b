//! Bad input: clear messages and documented exit codes, never a panic.
use std::process::Command;

use gputrace_tests::{gputrace, require_root};

fn gputrace_output(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(gputrace()).args(args).output().expect("gputrace runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn a_pid_that_does_not_exist() {
    require_root();
    let (code, stdout, stderr) = gputrace_output(&["attach", "--pid", "999999999"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("no process with pid 999999999"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

#[test]
fn not_root_names_the_missing_capabilities() {
    require_root();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(gputrace())
        .args(["attach", "--pid", "1", "--duration", "1"])
        .output()
        .expect("setpriv runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"), "{stderr}");
}

#[test]
fn a_command_that_cannot_be_run() {
    require_root();
    let (code, stdout, stderr) = gputrace_output(&["run", "--json", "--", "/nonexistent/program"]);
    assert_eq!(code, 0, "the trace itself worked: {stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("a report");
    assert_eq!(r["target"]["exit_code"], 127, "{r}");
    assert!(stderr.contains("cannot run `/nonexistent/program`"), "{stderr}");
}

#[test]
fn a_process_without_cuda_is_reported_as_such() {
    require_root();
    let (code, stdout, stderr) = gputrace_output(&["run", "--json", "--", "sleep", "0.3"]);
    assert_eq!(code, 0, "{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("a report");
    assert_eq!(r["target"]["cuda_loaded"], false);
    assert_eq!(r["verdict"], "no-cuda-work");
    assert_eq!(r["cuda"]["launches"]["kernels"], 0);
}

#[test]
fn bad_flags_are_usage_errors() {
    require_root();
    let (code, _, stderr) = gputrace_output(&["attach", "--pid", "1", "--duration=-3"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("positive number of seconds"), "{stderr}");
    let (code, _, stderr) = gputrace_output(&["attach", "--pid", "1", "--duration", "soon"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a number of seconds"), "{stderr}");
    let (code, _, stderr) = gputrace_output(&["run", "--json"]);
    assert_eq!(code, 2, "a command is required: {stderr}");
}
