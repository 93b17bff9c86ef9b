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
    // What fires is the job's serious verdict at a checkpoint: launch-bound, unless something
    // else on the machine took the job's core for a second (CI once saw `cpu-starved` fire
    // first, with nothing of the tests beside it). Either way the dump's report says what
    // the recorder fired on.
    let fired = stderr.lines().find_map(|l| l.split_once("flight recorder: ")?.1.split_once(" fired (")).map(|(id, _)| id);
    let fired = fired.unwrap_or_else(|| panic!("the recorder fired on a diagnosis:\n{stderr}"));
    assert!(["launch-bound", "cpu-starved"].contains(&fired), "{stderr}");
    let at_diagnosis = PathBuf::from(format!("{}.1", file.display()));
    let (first, code, e) = report(&at_diagnosis);
    assert_eq!(code, 0, "{e}");
    assert_eq!(first["window"]["stopped_by"], "flight-dump");
    assert_eq!(first["tracer"]["recording"]["mode"], "flight");
    assert_eq!(first["verdict"], fired, "{first:#}");
    let (last, code, e) = report(&file);
    assert_eq!(code, 0, "{e}");
    assert_eq!(last["window"]["stopped_by"], "target-exited");
    let window = last["window"]["duration_s"].as_f64().expect("duration");
    assert!(window <= 3.5, "only the last ~2 s (plus the chunk in progress) are kept: {window}");
    assert_eq!(last["tracer"]["recording"]["from_session_start"], false);
    assert!(num(&last, "/cuda/launches/kernels") < 12000 * 200);
    let _ = fs::remove_dir_all(&dir);
}

/// An out-of-memory is a memory diagnosis, which leaves the verdict alone: the flight
/// recorder fires on it all the same, and the report of what it wrote out has the diagnosis
/// it fired on, as it fired (issue 59: the recorder judged the time analysis alone), and the
/// same diagnoses as the recorder judged.
#[test]
fn an_out_of_memory_fires_the_flight_recorder_and_its_dump_reports_the_diagnosis_it_fired_on() {
    require_root();
    let dir = gputrace_tests::scratch("flight_recorder", "oom");
    let file = dir.join("oom.gtr");
    // A job that outlives its out-of-memory by 3 s, as a server that catches one does: the
    // write-out at the end is not what is tested.
    let job = ["--steps", "200", "--driver-launches", "5", "--kernel-us", "300", "--sync", "--device-memory-mib", "256"];
    let job: Vec<&str> = job.into_iter().chain(["--oom-at-end", "1073741824", "--hold-ms", "3000"]).collect();
    let out = record(&file, &["--flight-recorder", "30", "-v"], &job);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fired = stderr.lines().find_map(|l| l.split_once("flight recorder: oom fired (")).map(|(_, rest)| rest);
    let summary = fired.and_then(|rest| rest.rsplit_once("); writing the buffer out")).map(|(s, _)| s);
    let summary = summary.unwrap_or_else(|| panic!("the recorder fired on the out-of-memory:\n{stderr}"));
    let (dump, code, e) = report(&PathBuf::from(format!("{}.1", file.display())));
    assert_eq!(code, 0, "{e}");
    assert_eq!(dump["window"]["stopped_by"], "flight-dump");
    let oom = dump["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "oom").unwrap_or_else(|| panic!("{dump:#}"));
    assert_eq!(oom["severity"], "high", "{oom:#}");
    assert_eq!(oom["summary"], summary, "the dump's report says what the recorder fired on");
    assert_eq!(num(&dump, "/memory/failed_for_good"), 1);
    // One entry to the analysis: what the recorder judged is what the dump's report says,
    // every diagnosis (memory ones included) with its figures, evidence and fix.
    let judged = stderr.lines().find_map(|l| l.split_once("flight recorder: judged ")).map(|(_, json)| json);
    let judged: serde_json::Value = serde_json::from_str(judged.unwrap_or_else(|| panic!("the recorder lists what it judged:\n{stderr}"))).expect("JSON");
    assert!(judged.as_array().is_some_and(|j| j.iter().any(|d| d["id"] == "oom")), "{judged:#}");
    assert_eq!(judged, dump["diagnoses"], "the recorder's diagnoses against the dump's report");
    let _ = fs::remove_dir_all(&dir);
}
