//! Recordings: `record` then `report` gives the live numbers; a killed recorder leaves a
//! readable prefix; damaged and cut files are reported, never panic; rotation loses nothing;
//! the Perfetto export is valid trace-event JSON. Counts and files, not verdicts: this suite
//! runs beside others (the flight recorder, which fires on a verdict, is `flight_recorder.rs`).
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use gputrace_tests::{
    fake_cuda_dir, fakejob, gputrace, num,
    recordings::{record, report},
    require_root, run_fakejob,
};
use serde_json::Value;

/// A deterministic workload: 120 steps of 50 launches, a pageable 64 KiB upload, a sync.
// The hold keeps the job alive a moment after its work: its copies are classified by its
// live memory map, which a job of a few milliseconds can take away before the reader, short
// of CPU on two cores next to a spinning fake GPU, gets to them (docs/architecture.md).
const JOB: &[&str] = &["--steps", "120", "--driver-launches", "50", "--kernel-us", "20", "--pageable-h2d", "65536", "--sync", "--hold-ms", "1000"];

fn scratch(name: &str) -> gputrace_tests::Scratch {
    gputrace_tests::scratch("recording", name)
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

/// The checked-in recording's report, byte for byte (`tests/data/v1-fakejob.report.json`): a
/// refactor leaves every figure and sentence where it was. A change that means to alter the
/// report rewrites the file (`GPUTRACE_WRITE_GOLDEN=1`) and says why in its commit.
#[test]
fn the_checked_in_recordings_report_is_unchanged_byte_for_byte() {
    // A relative path: the report names the file as given, and a clone may be anywhere.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let out = Command::new(gputrace())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["report", "--json", "data/v1-fakejob.gtr"])
        .output()
        .expect("gputrace report runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let golden = data.join("v1-fakejob.report.json");
    if std::env::var_os("GPUTRACE_WRITE_GOLDEN").is_some() {
        std::fs::write(&golden, &out.stdout).expect("golden written");
    }
    let expected = std::fs::read(&golden).expect("the golden report");
    if out.stdout != expected {
        let (now, was) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&expected));
        let first = now.lines().zip(was.lines()).position(|(a, b)| a != b);
        panic!("the report changed (first differing line {first:?}); if meant, rerun with GPUTRACE_WRITE_GOLDEN=1\nnow: {now}\nwas: {was}");
    }
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

/// A tmpfs of 1 MiB at `dir`, unmounted when dropped.
struct TinyDisk(PathBuf);

impl TinyDisk {
    fn mount(dir: &Path) -> Self {
        fs::create_dir_all(dir).expect("mount point");
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"]).arg(dir).status().expect("mount runs");
        assert!(status.success(), "mounting a tmpfs at {}", dir.display());
        Self(dir.to_owned())
    }
}

impl Drop for TinyDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Two launches, two syncs (one after a pageable copy) a step, ~3 s: more than 1 MiB.
const TWO_A_STEP: &[&str] = &["--steps", "6000", "--driver-launches", "2", "--kernel-us", "250", "--sync", "--pageable-h2d", "4096"];

/// Launches per step, and the window, of a report of `TWO_A_STEP` (the truth is 2.0).
fn launches_per_step(r: &Value) -> f64 {
    r["steps"]["per_step"]["launches"].as_f64().unwrap_or_else(|| panic!("no steps in {r:#}"))
}

#[test]
fn a_full_disk_stops_the_recording_and_both_the_summary_and_the_report_say_what_it_holds() {
    require_root();
    let dir = scratch("full-disk");
    let disk = TinyDisk::mount(&dir.join("tiny"));
    let file = disk.0.join("r.gtr");
    let out = record(&file, &[], TWO_A_STEP);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a write error fails the recording: {stderr}");
    assert!(!stderr.contains("gputrace: recorded"), "nothing is said to be recorded after a failure: {stderr}");
    assert!(stderr.contains("No space left"), "{stderr}");
    // "… holds the session up to 1.0 s of the 3.2 s traced (N frames, 0.7 MB) …"
    let line = stderr.lines().find(|l| l.contains("the recording is incomplete")).unwrap_or_else(|| panic!("{stderr}"));
    let number_before = |word: &str| -> f64 {
        let head = &line[..line.find(word).unwrap_or_else(|| panic!("{word} in {line}"))];
        head.split_whitespace().last().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{word} in {line}"))
    };
    let (held_s, traced_s) = (number_before("s of the"), number_before("s traced"));
    assert!(held_s < traced_s, "{line}");
    let size = fs::metadata(&file).expect("the recording").len() as f64;
    assert!((number_before("MB)") - size / 1e6).abs() < 0.051, "the size said is the file's ({size} B): {line}");
    // The file ends at its last whole checkpoint: a clean end, and a window that ends there.
    let (r, code, stderr) = report(&file);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("ends inside a frame"), "the file was cut back to its last flush: {stderr}");
    assert_eq!(r["window"]["stopped_by"], "recording-cut");
    let window = r["window"]["duration_s"].as_f64().expect("window");
    assert!((window - held_s).abs() < 0.06, "the report covers what the summary said: {window} s vs {line}");
    let per_step = launches_per_step(&r);
    assert!((1.95..=2.05).contains(&per_step), "launches per step {per_step} (2 in truth): {:#}", r["steps"]);
    assert_ne!(r["verdict"], "input-starved", "{:#}", r["diagnoses"]);
    drop(disk);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_recording_cut_between_checkpoints_ends_its_window_at_the_last_one() {
    require_root();
    let dir = scratch("cut-between");
    let file = dir.join("whole.gtr");
    assert!(record(&file, &[], TWO_A_STEP).status.success());
    let bytes = fs::read(&file).expect("recording");
    let (whole, _, _) = report(&file);
    let cut = dir.join("cut.gtr");
    for share in [0.35, 0.55, 0.8] {
        fs::write(&cut, &bytes[..(bytes.len() as f64 * share) as usize]).expect("write");
        let (r, code, stderr) = report(&cut);
        assert_eq!(code, 0, "{stderr}");
        let per_step = launches_per_step(&r);
        assert!((1.95..=2.05).contains(&per_step), "cut at {share}: launches per step {per_step}: {:#}", r["steps"]);
        let notes = r["tracer"]["notes"].to_string();
        assert!(notes.contains("after the last checkpoint"), "cut at {share}: {notes}");
        let window = r["window"]["duration_s"].as_f64().expect("window");
        assert!(window < whole["window"]["duration_s"].as_f64().expect("window"), "{window}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_second_recorder_on_the_same_path_stops_before_its_job_runs() {
    require_root();
    let dir = scratch("two-recorders");
    let file = dir.join("same.gtr");
    let start = |marker: &Path| {
        // The job touches `marker` once it runs: the loser's must never.
        Command::new(gputrace())
            .env("LD_LIBRARY_PATH", fake_cuda_dir())
            .args(["record", "--nvml-hz", "0", "-o"])
            .arg(&file)
            .args(["--", "sh", "-c", "touch \"$0\" && exec \"$1\" --steps 400 --driver-launches 2 --sync --hold-ms 1500"])
            .arg(marker)
            .arg(fakejob())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gputrace record starts")
    };
    let (a_ran, b_ran) = (dir.join("a-ran"), dir.join("b-ran"));
    let (a, b) = (start(&a_ran), start(&b_ran));
    let (a, b) = (a.wait_with_output().expect("a"), b.wait_with_output().expect("b"));
    let results = [(a, a_ran), (b, b_ran)];
    let winners: Vec<_> = results.iter().filter(|(o, _)| o.status.code() == Some(0)).collect();
    let losers: Vec<_> = results.iter().filter(|(o, _)| o.status.code() != Some(0)).collect();
    let said = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(winners.len(), 1, "one recorder wins: {:?}", results.iter().map(|(o, _)| said(o)).collect::<Vec<_>>());
    let (loser, loser_ran) = losers[0];
    let stderr = said(loser);
    assert_eq!(loser.status.code(), Some(2), "the loser stops as for a refused output: {stderr}");
    // Claimed while it started ("took this name"), or, had the winner been quicker, already
    // there when its command line was read.
    assert!((stderr.contains("took this name") || stderr.contains("a file is there")) && !stderr.contains("recorded"), "{stderr}");
    assert!(!loser_ran.exists(), "the loser's job never ran: {stderr}");
    assert!(winners[0].1.exists());
    let (r, code, stderr) = report(&file);
    assert_eq!(code, 0, "the winner's file is whole: {stderr}");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 800);
    let _ = fs::remove_dir_all(&dir);
}

/// A recording's frames: (kind, payload).
type Frames = Vec<(u16, Vec<u8>)>;

/// The frames of a recording.
fn frames_of(file: &Path) -> Frames {
    use gputrace::record::reader::Reader;
    let mut reader = Reader::open(file).expect("a recording");
    let mut frames = Vec::new();
    while let Some(f) = reader.next_frame() {
        let f = f.expect("a whole recording");
        frames.push((f.kind, f.payload));
    }
    frames
}

/// A recording of `frames`, each with a valid checksum.
fn write_frames(file: &Path, frames: &[(u16, Vec<u8>)]) {
    use gputrace::record::format;
    let mut bytes = format::preamble().to_vec();
    for (kind, payload) in frames {
        bytes.extend(format::frame(*kind, payload));
    }
    fs::write(file, bytes).expect("write");
}

/// `payload`'s JSON with `edit` applied.
fn edited(payload: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(payload).expect("JSON payload");
    edit(&mut v);
    serde_json::to_vec(&v).expect("JSON")
}

#[test]
fn recordings_inconsistent_behind_valid_checksums_are_damage() {
    use gputrace::record::format::kind;
    require_root();
    let dir = scratch("inconsistent");
    let file = dir.join("whole.gtr");
    assert!(record(&file, &[], JOB).status.success());
    let whole = frames_of(&file);
    let end = whole.iter().position(|(k, _)| *k == kind::END).expect("an end record");
    assert_eq!(end, whole.len() - 1, "the end record closes the file");
    let event = whole.iter().find(|(k, _)| *k == kind::EVENT).expect("an event").clone();
    let first_checkpoint = whole.iter().position(|(k, _)| *k == kind::CHECKPOINT).expect("a checkpoint");
    let mut cases: Vec<(&str, Frames, &str)> = Vec::new();
    let mut two_ends = whole.clone();
    two_ends.push(whole[end].clone());
    cases.push(("two end records", two_ends, "a second end record"));
    let mut after_end = whole.clone();
    after_end.push(event);
    cases.push(("an event after the end", after_end, "after the end record"));
    let mut end_first = whole.clone();
    end_first[end].1 = edited(&whole[end].1, |v| v["end_ns"] = 1.into());
    cases.push(("an end before the start", end_first, "before the start record"));
    let mut wrapping = whole.clone();
    wrapping[first_checkpoint].1 = edited(&whole[first_checkpoint].1, |v| v["snapshot"]["losses"][0] = u64::MAX.into());
    cases.push(("a loss counter at u64::MAX", wrapping, "more than any session counts"));
    let bad = dir.join("bad.gtr");
    for (what, frames, why) in cases {
        write_frames(&bad, &frames);
        let (r, code, stderr) = report(&bad);
        assert_eq!(code, 6, "{what}: damage, not a complete recording: {stderr}");
        assert!(stderr.contains(why), "{what}: {stderr}");
        assert_eq!(r["tracer"]["complete"], false, "{what}");
        let lost = num(&r, "/tracer/lost_events");
        assert!(lost < 1 << 32, "{what}: lost_events {lost}");
    }
    let _ = fs::remove_dir_all(&dir);
}

/// A planted job: a 4 MiB upload from pageable memory and a scalar read every step.
const PLANTED: &[&str] = &["--steps", "150", "--driver-launches", "10", "--kernel-us", "50", "--pageable-h2d", "4194304", "--item", "1", "--hold-ms", "1000"];
/// Its fixed twin: the same upload from pinned memory.
const PINNED_TWIN: &[&str] = &["--steps", "150", "--driver-launches", "10", "--kernel-us", "50", "--pinned-h2d", "4194304", "--item", "1", "--hold-ms", "1000"];

/// `gputrace diff`: a planted job recorded, then its fixed twin recorded after it. The diff
/// names the diagnosis that went away and checks its promise against the measured speed-up;
/// `--fail-below` gates; a compressed recording and a `--json` report are compared as the
/// file they came from; runs that cannot be compared are refused (issue 58).
#[test]
fn diff_checks_the_planted_jobs_promise_against_its_fixed_twin() {
    require_root();
    let dir = scratch("diff");
    let (planted, fixed) = (dir.join("planted.gtr"), dir.join("fixed.gtr"));
    let out = record(&planted, &["--json"], PLANTED);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = dir.join("planted.json");
    fs::write(&live, &out.stdout).expect("the live report");
    let out = record(&fixed, &[], PINNED_TWIN);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let diff = |args: &[&std::ffi::OsStr]| Command::new(gputrace()).arg("diff").args(args).output().expect("gputrace diff runs");
    let out = diff(&[planted.as_os_str(), fixed.as_os_str(), "--json".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(d["schema"], "gputrace.diff/1");
    assert_eq!(d["basis"], "steps", "{d:#}");
    let (before, after) = (d["before"]["steps_per_s"].as_f64().expect("steps before"), d["after"]["steps_per_s"].as_f64().expect("steps after"));
    let speedup = d["speedup"].as_f64().expect("speedup");
    assert!((speedup - after / before).abs() < 1e-9 && speedup > 1.0, "pinned uploads run faster: {d:#}");
    let gone: Vec<&str> = d["gone"].as_array().expect("gone").iter().filter_map(Value::as_str).collect();
    assert!(gone.contains(&"pageable-copy"), "{d:#}");
    let p = d["predictions"].as_array().and_then(|ps| ps.iter().find(|p| p["id"] == "pageable-copy")).unwrap_or_else(|| panic!("its promise is checked: {d:#}"));
    assert_eq!(p["measured"].as_f64(), Some(speedup));
    assert!(p["predicted"].as_f64().is_some_and(|x| x > 1.0), "{p:#}");
    assert!(d["time_account"].as_array().is_some_and(|a| !a.is_empty()), "{d:#}");
    // The gate: exit 1 below it, 0 above; the text says which.
    let out = diff(&[planted.as_os_str(), fixed.as_os_str(), "--fail-below".as_ref(), "1000".as_ref()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--fail-below 1000: FAILS") && text.contains("pageable-copy promised ×"), "{text}");
    let out = diff(&[planted.as_os_str(), fixed.as_os_str(), "--fail-below".as_ref(), "0.5".as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // The recording compressed (as the accuracy corpus keeps its), and the live JSON report:
    // each compared as the recording they stand for.
    let packed = dir.join("planted.gtr.zst");
    fs::write(&packed, zstd::encode_all(&fs::read(&planted).expect("read")[..], 3).expect("compress")).expect("write");
    assert_eq!(counts(&report(&packed).0), counts(&report(&planted).0), "a compressed recording reads as the plain one");
    for before in [&packed, &live] {
        let out = diff(&[before.as_os_str(), fixed.as_os_str(), "--json".as_ref()]);
        assert!(out.status.success(), "{}: {}", before.display(), String::from_utf8_lossy(&out.stderr));
        let again: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(again["gone"], d["gone"], "{}", before.display());
    }
    // The page: `export AFTER --html OUT --diff BEFORE` opens with the same comparison.
    let page = dir.join("page.html");
    let out = Command::new(gputrace()).arg("export").arg(&fixed).arg("--html").arg(&page).arg("--diff").arg(&planted).output().expect("export runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = fs::read_to_string(&page).expect("the page");
    assert!(html.contains("Before and after: ×") && html.contains("Diagnoses gone: ") && html.contains("pageable-copy"), "{html}");
    // Refused, with why: another program, a sweep's JSON, a missing file, a FIFO.
    let other = dir.join("other.json");
    let mut r: Value = serde_json::from_slice(&fs::read(&live).expect("read")).expect("JSON");
    r["target"]["command"] = "python3 serve.py".into();
    fs::write(&other, r.to_string()).expect("write");
    let sweep = dir.join("sweep.json");
    fs::write(&sweep, r#"{"schema": "gputrace.sweep/1"}"#).expect("write");
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()));
    for (bad, says) in [
        (other.as_path(), "two different programs"),
        (sweep.as_path(), "gputrace.sweep/1"),
        (dir.join("missing").as_path(), "cannot open"),
        (fifo.as_path(), "not a regular file"),
    ] {
        let out = diff(&[planted.as_os_str(), bad.as_os_str()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", bad.display());
        assert!(stderr.contains(says) && out.stdout.is_empty(), "{}: {stderr}", bad.display());
    }
    // A page is not written when its diff is refused.
    let unwritten = dir.join("unwritten.html");
    let out = Command::new(gputrace()).arg("export").arg(&fixed).arg("--html").arg(&unwritten).arg("--diff").arg(&other).output().expect("export runs");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!unwritten.exists(), "nothing written for a refused diff");
}
