//! Recordings: `record` then `report` gives the live numbers; a killed recorder leaves a
//! readable prefix; damaged and cut files are reported, never panic; rotation loses nothing;
//! the flight recorder writes out on a signal and on a diagnosis; the Perfetto export is
//! valid trace-event JSON.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use gputrace_tests::{fake_cuda_dir, fakejob, gputrace, num, require_root, run_fakejob};
use serde_json::Value;

/// A deterministic workload: 120 steps of 50 launches, a pageable 64 KiB upload, a sync.
// The hold keeps the job alive a moment after its work: its copies are classified by its
// live memory map, which a job of a few milliseconds can take away before the reader, short
// of CPU on two cores next to a spinning fake GPU, gets to them (docs/architecture.md).
const JOB: &[&str] = &["--steps", "120", "--driver-launches", "50", "--kernel-us", "20", "--pageable-h2d", "65536", "--sync", "--hold-ms", "1000"];

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gputrace-recording-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn record(file: &Path, extra: &[&str], job: &[&str]) -> Output {
    Command::new(gputrace())
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .args(["record", "--nvml-hz", "0", "-o"])
        .arg(file)
        .args(extra)
        .arg("--")
        .arg(fakejob())
        .args(job)
        .output()
        .expect("gputrace record runs")
}

/// `gputrace report FILE --json`: the report (Null when stdout is not JSON) and exit code.
fn report(file: &Path) -> (Value, i32, String) {
    let out = Command::new(gputrace()).args(["report", "--json"]).arg(file).output().expect("gputrace report runs");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    // A damaged recording's report too keeps to the published schema.
    if !report.is_null() {
        gputrace_tests::assert_valid(&report);
    }
    (report, out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The figures a recording must reproduce exactly.
fn counts(r: &Value) -> Vec<(&'static str, u64)> {
    [
        "/cuda/launches/kernels",
        "/cuda/copies/h2d/count",
        "/cuda/copies/h2d/bytes",
        "/cuda/copies/h2d/pageable",
        "/cuda/syncs/count",
        "/cuda/allocs/count",
    ]
    .into_iter()
    .map(|p| (p, num(r, p)))
    .collect()
}

/// Everything but where the report came from.
fn without_source(mut r: Value) -> Value {
    r["tracer"]["recording"] = Value::Null;
    r
}

#[test]
fn the_offline_report_is_the_live_report() {
    require_root();
    let dir = scratch("same-session");
    let file = dir.join("job.gtr");
    // `record --json` prints the live report of the very session it records.
    let job = ["--steps", "300", "--driver-launches", "40", "--kernel-us", "200", "--pageable-h2d", "65536", "--item", "1", "--alloc-churn", "1"];
    let out = record(&file, &["--json"], &job);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = gputrace_tests::report_json(&out.stdout);
    let (offline, code, stderr) = report(&file);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(without_source(offline), without_source(live), "every figure, timings included");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn record_then_report_gives_the_numbers_of_a_live_run() {
    require_root();
    let (live, code, stderr) = run_fakejob(JOB);
    assert_eq!(code, 0, "{stderr}");
    let dir = scratch("same");
    let file = dir.join("job.gtr");
    let out = record(&file, &[], JOB);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::metadata(&file).expect("recording").permissions().mode() & 0o777, 0o600, "recordings are private");
    let (offline, code, stderr) = report(&file);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(counts(&offline), counts(&live), "offline:\n{offline:#}");
    assert_eq!(num(&offline, "/cuda/launches/kernels"), 120 * 50);
    assert_eq!(offline["window"]["stopped_by"], "target-exited");
    assert_eq!(offline["tracer"]["complete"], true);
    assert_eq!(offline["tracer"]["recording"]["closed"], true);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_recorder_leaves_a_readable_prefix() {
    require_root();
    let dir = scratch("killed");
    let file = dir.join("job.gtr");
    let mut recorder = Command::new(gputrace())
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .args(["record", "--nvml-hz", "0", "-o"])
        .arg(&file)
        .arg("--")
        .arg(fakejob())
        .args(["--steps", "100000", "--driver-launches", "20", "--kernel-us", "200", "--sync"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gputrace record starts");
    // Armed, then at least two checkpoints (one a second) flushed.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fs::metadata(&file).map_or(0, |m| m.len()) < 20_000 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // The job the recorder started outlives a SIGKILLed recorder: find it by parentage (never
    // by name, which could match another process on the host) and end it too.
    let job = children_of(recorder.id());
    recorder.kill().expect("SIGKILL");
    let _ = recorder.wait();
    for pid in job {
        // SAFETY: a plain signal to a process this test started (through the recorder).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    let (r, code, stderr) = report(&file);
    assert_eq!(code, 0, "a cut tail is what a killed recorder leaves: {stderr}");
    assert_eq!(r["window"]["stopped_by"], "recording-cut", "{r:#}");
    assert_eq!(r["tracer"]["complete"], false);
    assert_eq!(r["tracer"]["recording"]["closed"], false);
    let kernels = num(&r, "/cuda/launches/kernels");
    assert!(kernels >= 20 * 100, "the prefix holds the work up to the last flush: {kernels}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn cut_and_damaged_recordings_are_reported_never_a_panic() {
    require_root();
    let dir = scratch("damaged");
    let file = dir.join("job.gtr");
    assert!(record(&file, &[], JOB).status.success());
    let bytes = fs::read(&file).expect("recording");
    let whole = counts(&report(&file).0);
    let bad = dir.join("bad.gtr");
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..60 {
        let mut damaged = bytes.clone();
        if round % 2 == 0 {
            damaged.truncate(next() as usize % bytes.len());
        } else {
            for _ in 0..=(round % 5) {
                let at = next() as usize % damaged.len();
                damaged[at] ^= (next() as u8) | 1;
            }
        }
        fs::write(&bad, &damaged).expect("write");
        let (r, code, stderr) = report(&bad);
        assert!([0, 6].contains(&code), "round {round}: exit {code}: {stderr}");
        assert!(!stderr.contains("panicked"), "round {round}: {stderr}");
        if r == Value::Null {
            assert_eq!(code, 6, "no report means a refused file: {stderr}");
            assert!(stderr.contains("gputrace:"), "{stderr}");
        } else {
            // What a damaged file reports can only be less than the whole.
            for ((name, got), (_, all)) in counts(&r).into_iter().zip(&whole) {
                assert!(got <= *all, "round {round}: {name} {got} > {all}");
            }
        }
    }
    fs::write(&bad, b"not a recording at all").expect("write");
    let (_, code, stderr) = report(&bad);
    assert_eq!(code, 6);
    assert!(stderr.contains("not a gputrace recording"), "{stderr}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn rotated_files_add_up_to_the_whole_session() {
    require_root();
    let dir = scratch("rotate");
    let file = dir.join("job.gtr");
    // ~9 s: a checkpoint (where files rotate) every second, and a 64K file fills in about
    // two (at ~6 s the third file was a matter of timing).
    let job = ["--steps", "600", "--driver-launches", "30", "--kernel-us", "500", "--pageable-h2d", "4096", "--sync"];
    let out = record(&file, &["--max-size", "64K", "--keep", "50"], &job);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut files = vec![file.clone()];
    files.extend((1..=50).map(|n| PathBuf::from(format!("{}.{n}", file.display()))).filter(|p| p.exists()));
    assert!(files.len() >= 3, "64K rotates a 600-step recording several times: {files:?}");
    let (mut kernels, mut copies, mut segments) = (0, 0, Vec::new());
    for f in &files {
        let (r, code, stderr) = report(f);
        assert_eq!(code, 0, "{}: {stderr}", f.display());
        kernels += num(&r, "/cuda/launches/kernels");
        copies += num(&r, "/cuda/copies/h2d/count");
        segments.push(num(&r, "/tracer/recording/segment"));
        assert_eq!(r["tracer"]["recording"]["from_session_start"], num(&r, "/tracer/recording/segment") == 0);
    }
    segments.sort_unstable();
    assert_eq!(segments, (0..files.len() as u64).collect::<Vec<_>>());
    assert_eq!(kernels, 600 * 30, "every launch is in exactly one file");
    assert_eq!(copies, 600);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_flight_recorder_writes_out_on_a_diagnosis_and_at_the_end() {
    require_root();
    let dir = scratch("flight");
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

#[test]
fn the_perfetto_export_is_valid_trace_event_json() {
    require_root();
    let dir = scratch("export");
    let file = dir.join("job.gtr");
    assert!(record(&file, &[], JOB).status.success());
    let out_file = dir.join("job.json");
    let out = Command::new(gputrace()).args(["export"]).arg(&file).arg("--perfetto").arg(&out_file).output().expect("export runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace: Value = serde_json::from_slice(&fs::read(&out_file).expect("export")).expect("one JSON document");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let frames = trace["stackFrames"].as_object().expect("stackFrames");
    let (mut copies, mut syncs, mut names, mut samples) = (0, 0, 0, 0);
    for e in events {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        assert!(e["name"].is_string() && e["pid"].is_u64(), "{e}");
        match ph {
            "X" => {
                assert!(e["ts"].is_number() && e["tid"].is_u64(), "{e}");
                assert!(e["dur"].as_f64().expect("dur") >= 0.0, "{e}");
                copies += u64::from(e["cat"] == "copy");
                syncs += u64::from(e["cat"] == "sync");
            }
            "C" => assert!(e["args"].as_object().expect("args").values().all(Value::is_number), "{e}"),
            "P" => {
                let sf = e["sf"].as_str().expect("a stack frame");
                assert!(frames.contains_key(sf), "{e}");
                samples += 1;
            }
            "i" => assert!(["g", "p", "t"].contains(&e["s"].as_str().expect("scope")), "{e}"),
            "M" => {
                assert!(["process_name", "thread_name"].contains(&e["name"].as_str().expect("name")), "{e}");
                names += 1;
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    let (r, _, _) = report(&file);
    assert_eq!(copies, num(&r, "/cuda/copies/h2d/count") + num(&r, "/cuda/copies/d2h/count"), "one slice per recorded copy");
    assert_eq!(syncs, num(&r, "/cuda/syncs/count"), "one slice per recorded sync");
    assert!(copies >= 120);
    assert!(names >= 2);
    assert!(samples > 0, "the threads' stacks are on the timeline");
    for f in frames.values() {
        assert!(f["name"].is_string() && f["parent"].as_str().is_none_or(|p| frames.contains_key(p)), "{f}");
    }
    assert!(events.iter().any(|e| e["name"].as_str().is_some_and(|n| n.starts_with("verdict: "))), "the verdict is annotated");
    assert!(events.iter().any(|e| e["name"] == "kernel launches/s"), "launch-rate counter track");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_planted_symlink_at_the_output_is_not_followed() {
    require_root();
    let dir = scratch("symlink");
    let victim = dir.join("victim");
    fs::write(&victim, b"keep me").expect("victim");
    let file = dir.join("job.gtr");
    std::os::unix::fs::symlink(&victim, &file).expect("symlink");
    // Refused by default (a link is not written through); --force replaces the link itself.
    assert_eq!(record(&file, &[], &["--steps", "5", "--driver-launches", "1"]).status.code(), Some(2));
    assert!(fs::symlink_metadata(&file).expect("file").file_type().is_symlink());
    assert!(record(&file, &["--force"], &["--steps", "5", "--driver-launches", "1"]).status.success());
    assert_eq!(fs::read(&victim).expect("victim"), b"keep me");
    assert!(fs::symlink_metadata(&file).expect("file").file_type().is_file());
    let _ = fs::remove_dir_all(&dir);
}

/// The child processes of `pid` (`/proc/PID/task/*/children`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// A recording made by format version 1 (`tests/data/v1-fakejob.gtr`: `gputrace record` of
/// `fakejob --steps 60 --driver-launches 5 --kernel-us 150 --item 1 --host-us 2000` on the
/// fake CUDA, 2026-12-02) keeps reading, with the numbers it was made with. A reader change
/// that breaks old files fails here, as the wire contract's snapshot does for the numbers
/// the format is built on (tracer/src/record/contract.rs).
#[test]
fn a_version_1_recording_keeps_reading() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/v1-fakejob.gtr");
    let (r, code, stderr) = report(&file);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["tool"]["version"], "0.1.0", "the tool that made it");
    assert_eq!(r["window"]["stopped_by"], "target-exited");
    assert_eq!(r["target"]["exit_code"], 0);
    assert_eq!(num(&r, "/tracer/lost_events"), 0);
    assert_eq!(num(&r, "/cuda/launches/kernels"), 300, "60 steps of 5 launches");
    assert_eq!(num(&r, "/cuda/copies/d2h/count"), 60, "a scalar read a step");
    assert_eq!(num(&r, "/cuda/copies/d2h/scalar_reads"), 60);
    assert_eq!(num(&r, "/cuda/copies/d2h/classified/pageable"), 60);
    let ids: Vec<&str> = r["diagnoses"].as_array().expect("diagnoses").iter().filter_map(|d| d["id"].as_str()).collect();
    assert!(ids.contains(&"host-sync"), "the planted sync is found: {ids:?}");
    assert!(ids.contains(&r["verdict"].as_str().unwrap_or_default()), "the verdict is one of them: {r:#}");
}

/// The text report's colour follows `--color` and `NO_COLOR`, whatever stdout is.
#[test]
fn the_text_report_is_coloured_as_asked() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/v1-fakejob.gtr");
    let text = |args: &[&str], no_color: bool| {
        let mut cmd = Command::new(gputrace());
        cmd.args(args).arg("report").arg(&file).env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let out = cmd.output().expect("gputrace report runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(!text(&[], false).contains('\x1b'), "auto: no colour into a pipe");
    assert!(text(&["--color", "always"], false).contains("\x1b[1m"), "always: colour even into a pipe");
    assert!(!text(&["--color", "never"], false).contains('\x1b'));
    assert!(!text(&[], true).contains('\x1b'), "NO_COLOR");
    let bad = Command::new(gputrace()).args(["--color", "sometimes", "report"]).arg(&file).output().expect("runs");
    assert_eq!(bad.status.code(), Some(2), "a bad value is a usage error");
}
