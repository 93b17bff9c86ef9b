//! The flight recorder writes out on a diagnosis and at the end: a verdict fires it, so this
//! suite runs alone (xtask/src/suites.rs).
use std::{fs, path::PathBuf};

use gputrace_tests::{
    num,
    recordings::{record, report},
    require_root,
};

#[test]
fn the_flight_recorder_writes_out_on_a_diagnosis_and_at_the_end() {
    require_root();
    let dir = gputrace_tests::scratch("flight_recorder", "flight");
    let file = dir.join("flight.gtr");
    // Launch-bound for ~4 s: the diagnosis fires after a checkpoint or two.
    let job = ["--steps", "12000", "--driver-launches", "200", "--kernel-us", "1", "--sync"];
    let out = record(&file, &["--flight-recorder", "2", "-v"], &job);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("flight recorder: launch-bound fired"), "{stderr}");
    let at_diagnosis = PathBuf::from(format!("{}.1", file.display()));
    let (first, code, e) = report(&at_diagnosis);
    assert_eq!(code, 0, "{e}");
    assert_eq!(first["window"]["stopped_by"], "flight-dump");
    assert_eq!(first["tracer"]["recording"]["mode"], "flight");
    assert_eq!(first["verdict"], "launch-bound", "{first:#}");
    let (last, code, e) = report(&file);
    assert_eq!(code, 0, "{e}");
    assert_eq!(last["window"]["stopped_by"], "target-exited");
    let window = last["window"]["duration_s"].as_f64().expect("duration");
    assert!(window <= 3.5, "only the last ~2 s (plus the chunk in progress) are kept: {window}");
    assert_eq!(last["tracer"]["recording"]["from_session_start"], false);
    assert!(num(&last, "/cuda/launches/kernels") < 12000 * 200);
    let _ = fs::remove_dir_all(&dir);
}
