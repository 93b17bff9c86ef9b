//! Terminal injection: a traced job chooses the names gputrace prints — its program's path
//! (and so its call sites), its libraries' paths, its command line. Run from a directory
//! whose name holds escape sequences (clear the screen, retitle the window), every text face
//! (`run`, `attach`, `report` of a recording, `sweep`, the live status line and the log on
//! stderr) shows the name with no control byte in it.
use std::{
    ffi::OsStr,
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use gputrace_tests::{fake_cuda_dir, gputrace, require_root};

/// The directory name: clears the screen, then sets the window title.
const HOSTILE: &[u8] = b"e\x1b[2J\x1b]0;pwned\x07d";
/// How it reads once made printable.
const SHOWN: &str = "e?[2J?]0;pwned?d";

/// A fakejob with its symbols but no line tables (so its sites name the file it is in),
/// and the fake CUDA beside it, in the hostile directory.
fn hostile_job(name: &str) -> (PathBuf, PathBuf) {
    let scratch = std::env::temp_dir().join(format!("gputrace-terminal-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    let dir = scratch.join(OsStr::from_bytes(HOSTILE));
    fs::create_dir_all(&dir).expect("hostile dir");
    let job = dir.join("fakejob");
    let status = Command::new("strip").arg("--strip-debug").arg("-o").arg(&job).arg(gputrace_tests::fakejob()).status().expect("strip runs");
    assert!(status.success());
    for lib in ["libcuda.so.1", "libcudart.so.13"] {
        fs::copy(fake_cuda_dir().join(lib), dir.join(lib)).expect("copy the fake CUDA");
    }
    (job, scratch)
}

/// A scalar read every step with host work after it: `host-sync`, high, with its site in the
/// job's own `read_scalar` (host-bound's fix would be bounded by CI's two cores, and a
/// problem too small to matter is not detailed).
const WORK: &[&str] = &["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"];

fn gt(job: &Path) -> Command {
    let mut c = Command::new(gputrace());
    c.env("LD_LIBRARY_PATH", job.parent().expect("dir")).args(["--color", "never"]);
    c
}

/// No control character but line breaks (and tabs) in `bytes`.
fn assert_printable(face: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let bad: Vec<(usize, char)> = text.char_indices().filter(|&(_, c)| c.is_control() && c != '\n' && c != '\t').collect();
    assert!(bad.is_empty(), "{face}: control characters {bad:?} in:\n{}", text.escape_debug());
}

fn output(cmd: &mut Command) -> (Vec<u8>, Vec<u8>) {
    let out = cmd.stdin(Stdio::null()).output().expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    (out.stdout, out.stderr)
}

/// The text report's sites name the job's file, made printable.
fn assert_sites_shown(face: &str, stdout: &[u8]) {
    let text = String::from_utf8_lossy(stdout);
    assert!(text.contains(&format!("at read_scalar ({SHOWN}/fakejob)")), "{face}: the site is not shown:\n{}", text.escape_debug());
}

#[test]
fn run_and_report_of_a_recording_print_no_control_bytes() {
    require_root();
    let (job, scratch) = hostile_job("run");
    let (stdout, stderr) = output(gt(&job).args(["-v", "run", "--nvml-hz", "0", "--"]).arg(&job).args(WORK));
    assert_printable("run (stdout)", &stdout);
    assert_printable("run (stderr: the log quotes the library paths)", &stderr);
    assert_sites_shown("run", &stdout);
    assert!(String::from_utf8_lossy(&stderr).contains(SHOWN), "the log names the libraries probed");

    let rec = scratch.join("job.gtr");
    let (_, stderr) = output(gt(&job).args(["record", "--nvml-hz", "0", "-o"]).arg(&rec).arg("--").arg(&job).args(WORK));
    assert_printable("record (stderr)", &stderr);
    let (stdout, stderr) = output(gt(&job).arg("report").arg(&rec));
    assert_printable("report (stdout)", &stdout);
    assert_printable("report (stderr)", &stderr);
    assert_sites_shown("report", &stdout);
    let _ = fs::remove_dir_all(&scratch);
}

#[test]
fn attach_prints_no_control_bytes() {
    require_root();
    let (job, scratch) = hostile_job("attach");
    let mut target =
        Command::new(&job).arg("--gate").args(WORK).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("the job starts");
    let mut line = String::new();
    BufReader::new(target.stdout.as_mut().expect("piped")).read_line(&mut line).expect("ready");
    let pid = line.trim().strip_prefix("ready ").expect("ready PID").to_owned();
    let mut tracer = gt(&job)
        .args(["-v", "attach", "--nvml-hz", "0", "--pid", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gputrace attaches");
    let mut stderr = BufReader::new(tracer.stderr.take().expect("piped"));
    let mut log = Vec::new();
    while !String::from_utf8_lossy(&log).contains("armed: ") {
        assert!(stderr.read_until(b'\n', &mut log).expect("stderr") > 0, "gputrace ended before arming");
    }
    target.stdin.as_mut().expect("piped").write_all(b"go\n").expect("gate opens");
    assert!(target.wait().expect("the job ends").success());
    let mut stdout = Vec::new();
    tracer.stdout.take().expect("piped").read_to_end(&mut stdout).expect("report");
    stderr.read_to_end(&mut log).expect("stderr");
    assert_eq!(tracer.wait().expect("gputrace exits").code(), Some(0), "{}", String::from_utf8_lossy(&log));
    assert_printable("attach (stdout)", &stdout);
    assert_printable("attach (stderr)", &log);
    assert_sites_shown("attach", &stdout);
    let _ = fs::remove_dir_all(&scratch);
}

#[test]
fn the_sweep_prints_no_control_bytes() {
    require_root();
    let (job, scratch) = hostile_job("sweep");
    let mut holder = Command::new(&job).args(["--hold-ms", "60000"]).stdout(Stdio::piped()).spawn().expect("the holder starts");
    let mut line = String::new();
    let mut out = BufReader::new(holder.stdout.take().expect("piped"));
    while !line.starts_with("holding") {
        line.clear();
        assert!(out.read_line(&mut line).expect("holder output") > 0, "the holder ended before holding");
    }
    let result = gt(&job).args(["sweep", "--duration", "1"]).stdin(Stdio::null()).output().expect("the sweep runs");
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(result.status.code(), Some(0), "{}", String::from_utf8_lossy(&result.stderr));
    assert_printable("sweep (stdout)", &result.stdout);
    assert_printable("sweep (stderr)", &result.stderr);
    assert!(String::from_utf8_lossy(&result.stdout).contains(SHOWN), "the holder's command line is shown: {}", String::from_utf8_lossy(&result.stdout));
    let _ = fs::remove_dir_all(&scratch);
}

#[test]
fn the_live_status_line_on_a_terminal_prints_no_control_bytes_but_its_own() {
    require_root();
    let (job, scratch) = hostile_job("status");
    // `script` gives gputrace a terminal: the start line and the status line are drawn.
    let slow: Vec<&str> = ["--steps", "600"].iter().chain(&WORK[2..]).copied().collect();
    let shell = format!("exec \"$GT\" --color never run --nvml-hz 0 -- \"$JOB\" {}", slow.join(" "));
    let out = Command::new("script")
        .args(["-qfec", &shell, "/dev/null"])
        .env("GT", gputrace())
        .env("JOB", &job)
        .env("LD_LIBRARY_PATH", job.parent().expect("dir"))
        .stdin(Stdio::null())
        .output()
        .expect("script runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let raw = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(raw.contains("CUDA calls") && raw.contains("Ctrl-C to stop"), "no start or status line: {}", raw.escape_debug());
    // What the terminal itself adds (CR before LF) and what the status line writes to redraw
    // itself are the only control bytes allowed.
    let own = raw.replace("\r\n", "\n").replace("\r\x1b[K", "");
    assert_printable("the terminal (start line, status line, report)", own.as_bytes());
    assert!(own.contains(&format!("{SHOWN}/fakejob")), "the start line names the command: {}", own.escape_debug());
    assert_sites_shown("run on a terminal", own.as_bytes());
    let _ = fs::remove_dir_all(&scratch);
}
